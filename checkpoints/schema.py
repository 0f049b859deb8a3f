"""writegate's own tables: one append-only list of migrations, as LangGraph's savers keep.

Everything here lives in writegate's schema (`checkpoints/namespace.py`): the ledger
(proposals, tokens, executions, audit), the tombstones of purged operations, the
questions that reached a client, the timelines the database has been on with the
reconcilers' checks after each promotion, and the webhook outbox. Nothing else: the demo
domain's tables are the demo's (`demo/schema.py`), the HTTP service's are the
service's (`surfaces/store`), and LangGraph's checkpoint tables are `PostgresSaver.setup()`'s.

The position in `MIGRATIONS` (from 1) is the version; `checkpoints/migrate.py` records
each applied version with a checksum of its text in `writegate.migrations`. Never edit,
reorder or remove an entry that has shipped (a test pins their checksums): append.
`LEGACY_ADOPTION` moves the tables of a database set up before the schema existed (all
in `public`, named `wg_*`) into it, once, instead of migration 1.
"""

from __future__ import annotations

import psycopg
from langgraph.checkpoint.postgres import PostgresSaver
from psycopg.rows import dict_row, tuple_row

from writegate.checkpoints.migrate import (
    TRY_SESSION_LOCK,
    MigrationList,
    apply_migrations,
    renamed_as_fresh,
    wait_for_lock,
)
from writegate.checkpoints.namespace import DEFAULT_SCHEMA

# Migration 1 as shipped: the tables, then the functions. The functions are kept apart
# so that an adopted database gets them too (`NAME_AS_FRESH`).
_LEDGER_TABLES = """
CREATE TABLE writegate.proposals (
    proposal_id         text PRIMARY KEY,
    thread_id           text NOT NULL,
    message_id          text NOT NULL DEFAULT '',
    tool_call_id        text NOT NULL,
    subject             text NOT NULL,
    tenant_id           text NOT NULL,
    operation           text NOT NULL,
    resource            text NOT NULL,
    args                jsonb NOT NULL,
    args_digest         text NOT NULL,
    digest_scheme       text NOT NULL DEFAULT 'jcs-sha256'
                            CHECK (digest_scheme IN ('wg-c14n-1', 'jcs-sha256')),
    fingerprint         text NOT NULL,
    state_version       bigint NOT NULL,
    preview             jsonb NOT NULL,
    policy_version      text NOT NULL,
    request_key         text NOT NULL UNIQUE,
    status              text NOT NULL CHECK (status IN ('awaiting_confirmation',
                            'awaiting_second_approval', 'confirmed', 'declined', 'cancelled',
                            'expired', 'superseded', 'revoked', 'executed')),
    superseded_by       text REFERENCES writegate.proposals (proposal_id),
    decided_by          text,
    decided_at          timestamptz,
    decision_reason     text,
    created_at          timestamptz NOT NULL,
    expires_at          timestamptz NOT NULL,
    tier                text NOT NULL DEFAULT 'one_click',
    risk                jsonb,
    second_approver     text,
    second_approved_at  timestamptz,
    revoked_by          text,
    revoked_at          timestamptz,
    traceparent         text,
    -- one proposal per tool call of one model message
    CONSTRAINT proposals_call_key UNIQUE (thread_id, message_id, tool_call_id),
    -- a requester may not approve their own request
    CONSTRAINT proposals_not_self_approved
        CHECK (second_approver IS NULL OR second_approver <> subject)
);
-- A user's pending approvals and history, the sweep of stale ones, an approver's queue,
-- the open proposal for the same request and the purge stay index scans at any size.
CREATE INDEX proposals_pending_idx ON writegate.proposals (tenant_id, subject, created_at)
    WHERE status IN ('awaiting_confirmation', 'confirmed');
CREATE INDEX proposals_subject_idx ON writegate.proposals (tenant_id, subject, created_at);
CREATE INDEX proposals_expiry_idx ON writegate.proposals (expires_at)
    WHERE status = 'awaiting_confirmation';
CREATE INDEX proposals_second_idx ON writegate.proposals (tenant_id, created_at)
    WHERE status = 'awaiting_second_approval';
CREATE INDEX proposals_open_fp_idx ON writegate.proposals (thread_id, fingerprint)
    WHERE status IN ('awaiting_confirmation', 'awaiting_second_approval', 'confirmed');
CREATE INDEX proposals_purge_idx ON writegate.proposals (expires_at)
    WHERE status <> 'executed';

CREATE TABLE writegate.tokens (
    token_hash      text PRIMARY KEY,
    proposal_id     text NOT NULL UNIQUE REFERENCES writegate.proposals (proposal_id),
    subject         text NOT NULL,
    tenant_id       text NOT NULL,
    audience        text NOT NULL,
    operation       text NOT NULL,
    resource        text NOT NULL,
    args_digest     text NOT NULL,
    digest_scheme   text NOT NULL DEFAULT 'jcs-sha256'
                        CHECK (digest_scheme IN ('wg-c14n-1', 'jcs-sha256')),
    policy_version  text NOT NULL,
    request_key     text NOT NULL,
    tier            text NOT NULL DEFAULT 'one_click',
    issued_at       timestamptz NOT NULL,
    expires_at      timestamptz NOT NULL,
    status          text NOT NULL CHECK (status IN ('issued', 'consumed', 'revoked')),
    consumed_at     timestamptz,
    execution_id    text UNIQUE
);

CREATE TABLE writegate.executions (
    execution_id      text PRIMARY KEY,
    request_key       text NOT NULL UNIQUE,
    token_hash        text NOT NULL UNIQUE REFERENCES writegate.tokens (token_hash),
    proposal_id       text NOT NULL UNIQUE REFERENCES writegate.proposals (proposal_id),
    tenant_id         text NOT NULL,
    subject           text NOT NULL,
    operation         text NOT NULL,
    resource          text NOT NULL,
    args              jsonb NOT NULL,
    args_digest       text NOT NULL,
    digest_scheme     text NOT NULL DEFAULT 'jcs-sha256'
                          CHECK (digest_scheme IN ('wg-c14n-1', 'jcs-sha256')),
    fingerprint       text NOT NULL,
    status            text NOT NULL CHECK (status IN ('prepared', 'running', 'succeeded',
                          'failed_retryable', 'failed_terminal', 'unknown', 'escalated')),
    attempts          integer NOT NULL DEFAULT 0,
    lease_owner       text,
    lease_expires_at  timestamptz,
    provider_ref      text,
    result            jsonb,
    error_code        text,
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL,
    completed_at      timestamptz,
    -- reconciliation: checks made, when the next is due, when settled, why escalated
    checks            integer NOT NULL DEFAULT 0,
    next_check_at     timestamptz,
    reconciled_at     timestamptz,
    escalation        jsonb
);
-- Reconciliation picks up its backlog, escalations and the purge without a scan; an open
-- execution of the same request blocks a new proposal for it.
CREATE INDEX executions_backlog_idx ON writegate.executions (updated_at)
    WHERE status IN ('running', 'unknown', 'failed_retryable');
CREATE INDEX executions_unsettled_fp_idx ON writegate.executions (tenant_id, fingerprint)
    WHERE status IN ('running', 'unknown', 'failed_retryable', 'escalated');
CREATE INDEX executions_escalated_idx ON writegate.executions (created_at)
    WHERE status = 'escalated';
CREATE INDEX executions_reconciled_idx ON writegate.executions (reconciled_at)
    WHERE reconciled_at IS NOT NULL;
CREATE INDEX executions_purge_idx ON writegate.executions (completed_at)
    WHERE status IN ('succeeded', 'failed_terminal');

CREATE TABLE writegate.audit (
    audit_id          bigserial PRIMARY KEY,
    tenant_id         text NOT NULL,
    user_id           text NOT NULL,
    thread_id         text,
    tool_name         text NOT NULL,
    event             text NOT NULL,
    arguments         jsonb,
    arguments_hash    text,
    result            jsonb,
    status            text NOT NULL,
    error_code        text,
    duration_ms       integer NOT NULL,
    request_key       text,
    proposal_id       text,
    approver          text,
    requested_digest  text,
    approved_digest   text,
    executed_digest   text,
    created_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX audit_tenant_idx ON writegate.audit (tenant_id, created_at);
CREATE INDEX audit_thread_idx ON writegate.audit (thread_id, created_at);
CREATE INDEX audit_proposal_idx ON writegate.audit (proposal_id);
CREATE INDEX audit_ops_idx ON writegate.audit (event, tool_name, status, error_code)
    WHERE event IN ('execute', 'reconcile');
CREATE INDEX audit_conflict_idx ON writegate.audit (tool_name)
    WHERE error_code = 'idempotency_conflict';

-- What stays of a purged operation: enough to refuse running it again.
CREATE TABLE writegate.tombstones (
    request_key   text PRIMARY KEY,
    token_hash    text UNIQUE,
    proposal_id   text NOT NULL UNIQUE,
    thread_id     text NOT NULL,
    tool_call_id  text NOT NULL,
    tenant_id     text NOT NULL,
    subject       text NOT NULL,
    operation     text NOT NULL,
    fingerprint   text NOT NULL,
    execution_id  text,
    final_status  text NOT NULL,
    provider_ref  text,
    completed_at  timestamptz,
    purged_at     timestamptz NOT NULL
);
CREATE INDEX tombstones_call_idx ON writegate.tombstones (thread_id, tool_call_id);

-- Questions that reached a client (an interrupt that ended its run): an answer naming
-- no proposal counts only for a question recorded here.
CREATE TABLE writegate.presented (
    thread_id       text NOT NULL,
    checkpoint_ns   text NOT NULL,
    interrupt_index integer NOT NULL CHECK (interrupt_index >= 0),
    proposal_id     text NOT NULL
                        REFERENCES writegate.proposals (proposal_id) ON DELETE CASCADE,
    presented_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (thread_id, checkpoint_ns, interrupt_index)
);
CREATE INDEX presented_proposal_idx ON writegate.presented (proposal_id);
"""
_PROPOSE_FN = """
-- A ledger transaction's writes, each one statement: the rows arrive as JSON objects
-- (named like their columns) and the function writes them, or fails naming the guard
-- that no longer held (SQLSTATE WG001), so the error points at the call that made it.

-- A proposal for a tool call, and its audit row; false if the call has one already.
CREATE FUNCTION writegate.propose(proposal jsonb, audit jsonb) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO writegate.proposals (proposal_id, thread_id, message_id, tool_call_id,
        subject, tenant_id, operation, resource, args, args_digest, digest_scheme,
        fingerprint, state_version, preview, policy_version, request_key, status,
        created_at, expires_at, tier, risk, traceparent)
    SELECT p.proposal_id, p.thread_id, p.message_id, p.tool_call_id, p.subject,
        p.tenant_id, p.operation, p.resource, p.args, p.args_digest, p.digest_scheme,
        p.fingerprint, p.state_version, p.preview, p.policy_version, p.request_key,
        p.status, p.created_at, p.expires_at, p.tier, p.risk, p.traceparent
    FROM jsonb_populate_record(NULL::writegate.proposals, propose.proposal) AS p
    ON CONFLICT (thread_id, message_id, tool_call_id) DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM writegate.write_audit(jsonb_build_array(propose.audit));
    RETURN true;
END
$$;
"""
_WRITE_AUDIT_FN = """
-- Audit rows, in order.
CREATE FUNCTION writegate.write_audit(records jsonb) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO writegate.audit (tenant_id, user_id, thread_id, tool_name, event, arguments,
        arguments_hash, result, status, error_code, duration_ms, request_key, proposal_id,
        approver, requested_digest, approved_digest, executed_digest)
    SELECT a.tenant_id, a.user_id, a.thread_id, a.tool_name, a.event, a.arguments,
        a.arguments_hash, a.result, a.status, a.error_code, a.duration_ms, a.request_key,
        a.proposal_id, a.approver, a.requested_digest, a.approved_digest, a.executed_digest
    FROM jsonb_populate_recordset(NULL::writegate.audit, records) WITH ORDINALITY AS a
    ORDER BY ordinality
$$;
"""
_CLAIM_FN = """
-- The one move from a person's confirm to an execution: the proposal awaiting (or
-- confirmed, its token issued before) becomes executed, its token is consumed by the
-- execution (a token issued now is written consumed), the execution is claimed under
-- its request key, and the audit rows are written. Called with the proposal's row
-- locked by the caller's transaction; a guard that fails there is a bug, said plainly.
CREATE FUNCTION writegate.claim(proposal_id text, from_status text, decided_by text,
    token jsonb, issue boolean, execution jsonb, audit jsonb) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_moment timestamptz := (claim.execution ->> 'created_at')::timestamptz;
    v_execution text := claim.execution ->> 'execution_id';
BEGIN
    UPDATE writegate.proposals AS p
    SET status = 'executed',
        decided_by = COALESCE(claim.decided_by, p.decided_by),
        decided_at = CASE WHEN claim.decided_by IS NULL THEN p.decided_at ELSE v_moment END
    WHERE p.proposal_id = claim.proposal_id AND p.status = claim.from_status;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'writegate: proposal % is no longer %', claim.proposal_id,
            claim.from_status USING ERRCODE = 'WG001';
    END IF;
    IF claim.issue THEN
        INSERT INTO writegate.tokens (token_hash, proposal_id, subject, tenant_id, audience,
            operation, resource, args_digest, digest_scheme, policy_version, request_key,
            tier, issued_at, expires_at, status, consumed_at, execution_id)
        SELECT t.token_hash, t.proposal_id, t.subject, t.tenant_id, t.audience, t.operation,
            t.resource, t.args_digest, t.digest_scheme, t.policy_version, t.request_key,
            t.tier, t.issued_at, t.expires_at, 'consumed', v_moment, v_execution
        FROM jsonb_populate_record(NULL::writegate.tokens, claim.token) AS t;
    ELSE
        UPDATE writegate.tokens AS t
        SET status = 'consumed', consumed_at = v_moment, execution_id = v_execution
        WHERE t.token_hash = claim.token ->> 'token_hash' AND t.status = 'issued';
        IF NOT FOUND THEN
            RAISE EXCEPTION 'writegate: the token of proposal % is no longer issued',
                claim.proposal_id USING ERRCODE = 'WG001';
        END IF;
    END IF;
    INSERT INTO writegate.executions (execution_id, request_key, token_hash, proposal_id,
        tenant_id, subject, operation, resource, args, args_digest, digest_scheme,
        fingerprint, status, attempts, lease_owner, lease_expires_at, provider_ref, result,
        error_code, created_at, updated_at, completed_at)
    SELECT e.execution_id, e.request_key, e.token_hash, e.proposal_id, e.tenant_id,
        e.subject, e.operation, e.resource, e.args, e.args_digest, e.digest_scheme,
        e.fingerprint, e.status, e.attempts, e.lease_owner, e.lease_expires_at,
        e.provider_ref, e.result, e.error_code, e.created_at, e.updated_at, e.completed_at
    FROM jsonb_populate_record(NULL::writegate.executions, claim.execution) AS e;
    PERFORM writegate.write_audit(claim.audit);
END
$$;
"""

# What an adopted database lacks next to a fresh one, made good; a no-op on any other.
# Its tables came from the old list under `wg_` names, and so did their constraints,
# indexes and sequences; migration 1's functions were never created. Nothing reads those
# names, but a later migration may, and a database must not depend on its history.
NAME_AS_FRESH = (
    renamed_as_fresh("writegate.migrations")
    + """
DO $fresh$
BEGIN
    IF to_regprocedure('writegate.propose(jsonb, jsonb)') IS NULL THEN
        EXECUTE $fn$"""
    + _PROPOSE_FN
    + """$fn$;
    END IF;
    IF to_regprocedure('writegate.write_audit(jsonb)') IS NULL THEN
        EXECUTE $fn$"""
    + _WRITE_AUDIT_FN
    + """$fn$;
    END IF;
    IF to_regprocedure('writegate.claim(text, text, text, jsonb, boolean, jsonb, jsonb)') IS NULL
    THEN
        EXECUTE $fn$"""
    + _CLAIM_FN
    + """$fn$;
    END IF;
END
$fresh$;
"""
)

MIGRATIONS: list[str] = [
    # 1. the ledger, the tombstones of purged operations, the questions presented
    _LEDGER_TABLES + _PROPOSE_FN + _WRITE_AUDIT_FN + _CLAIM_FN,
    # 2. the timelines this database has been on (checkpoints/timelines.py): a promoted
    # standby starts a new one, and what was created before it began may have been
    # acted on in commits the failover lost. The timeline of the installation is marked
    # as having begun at -infinity: nothing before it is in doubt.
    """
CREATE TABLE writegate.timelines (
    timeline_id integer PRIMARY KEY,
    began_at    timestamptz NOT NULL DEFAULT now()
);
INSERT INTO writegate.timelines (timeline_id, began_at)
SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::integer,
       '-infinity'
WHERE NOT pg_is_in_recovery();
""",
    # 3. after a promotion (approval/failover.py): which promotions each tool's reconciler
    # has checked for what the lost commits did, under a lease, and what it found that a
    # person must settle and no execution row carries (an effect the downstream has under
    # a key the ledger lost whole; a proposal that may have run and that nothing can look
    # up; a listing that kept failing: request_key NULL).
    """
CREATE TABLE writegate.failover_checks (
    timeline_id       integer NOT NULL,
    operation         text NOT NULL,
    attempts          integer NOT NULL DEFAULT 0,
    lease_owner       text,
    lease_expires_at  timestamptz,
    checked_at        timestamptz,
    PRIMARY KEY (timeline_id, operation)
);
CREATE TABLE writegate.failover_escalations (
    escalation_id  bigserial PRIMARY KEY,
    request_key    text UNIQUE,
    operation      text NOT NULL,
    tenant_id      text,
    proposal_id    text,
    timeline_id    integer NOT NULL,
    reason         jsonb NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX failover_escalations_check_idx
    ON writegate.failover_escalations (timeline_id, operation) WHERE request_key IS NULL;
CREATE INDEX failover_escalations_tenant_idx
    ON writegate.failover_escalations (tenant_id, created_at);
""",
    # 4. a proposal locked for a decision or an execution, with what is read under its
    # lock (its token, the execution of its request key, whether that key was purged),
    # in one statement: the function takes the lock, then reads in a snapshot of its
    # own, so it sees what the lock's last holder committed. A later migration that
    # adds a column the ledger reads under the lock replaces the view and the function.
    # And the audit writer in PL/pgSQL, which keeps its statement's plan for the
    # session: a LANGUAGE sql function is planned again at every call.
    """
CREATE VIEW writegate.locked AS
SELECT
    p.proposal_id, p.thread_id, p.tool_call_id, p.subject, p.tenant_id, p.operation,
    p.resource, p.args, p.args_digest, p.fingerprint, p.state_version, p.preview,
    p.policy_version, p.request_key, p.status, p.superseded_by, p.decided_by,
    p.decided_at, p.created_at, p.expires_at, p.tier, p.risk, p.second_approver,
    p.second_approved_at, p.revoked_by, p.revoked_at, p.digest_scheme, p.message_id,
    p.decision_reason,
    t.token_hash AS t_token_hash, t.proposal_id AS t_proposal_id, t.subject AS t_subject,
    t.tenant_id AS t_tenant_id, t.audience AS t_audience, t.operation AS t_operation,
    t.resource AS t_resource, t.args_digest AS t_args_digest,
    t.policy_version AS t_policy_version, t.request_key AS t_request_key,
    t.issued_at AS t_issued_at, t.expires_at AS t_expires_at, t.status AS t_status,
    t.execution_id AS t_execution_id, t.tier AS t_tier,
    t.digest_scheme AS t_digest_scheme,
    e.execution_id AS x_execution_id, e.request_key AS x_request_key,
    e.token_hash AS x_token_hash, e.proposal_id AS x_proposal_id,
    e.tenant_id AS x_tenant_id, e.subject AS x_subject, e.operation AS x_operation,
    e.resource AS x_resource, e.args AS x_args, e.args_digest AS x_args_digest,
    e.fingerprint AS x_fingerprint, e.status AS x_status, e.attempts AS x_attempts,
    e.lease_owner AS x_lease_owner, e.lease_expires_at AS x_lease_expires_at,
    e.provider_ref AS x_provider_ref, e.result AS x_result, e.error_code AS x_error_code,
    e.created_at AS x_created_at, e.updated_at AS x_updated_at,
    e.completed_at AS x_completed_at, e.digest_scheme AS x_digest_scheme,
    EXISTS (SELECT 1 FROM writegate.tombstones s WHERE s.request_key = p.request_key)
        AS purged
FROM writegate.proposals p
LEFT JOIN writegate.tokens t ON t.proposal_id = p.proposal_id
LEFT JOIN writegate.executions e ON e.request_key = p.request_key;

CREATE FUNCTION writegate.lock_proposal(proposal_id text) RETURNS SETOF writegate.locked
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM writegate.proposals p WHERE p.proposal_id = lock_proposal.proposal_id
    FOR UPDATE;
    RETURN QUERY SELECT * FROM writegate.locked l
    WHERE l.proposal_id = lock_proposal.proposal_id;
END
$$;

CREATE OR REPLACE FUNCTION writegate.write_audit(records jsonb) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO writegate.audit (tenant_id, user_id, thread_id, tool_name, event, arguments,
        arguments_hash, result, status, error_code, duration_ms, request_key, proposal_id,
        approver, requested_digest, approved_digest, executed_digest)
    SELECT a.tenant_id, a.user_id, a.thread_id, a.tool_name, a.event, a.arguments,
        a.arguments_hash, a.result, a.status, a.error_code, a.duration_ms, a.request_key,
        a.proposal_id, a.approver, a.requested_digest, a.approved_digest, a.executed_digest
    FROM jsonb_populate_recordset(NULL::writegate.audit, records) WITH ORDINALITY AS a
    ORDER BY ordinality;
END
$$;
""",
    # 5. a database adopted before the adoption named its objects as a fresh one does
    # and created migration 1's functions (`NAME_AS_FRESH`): made good; elsewhere a no-op.
    NAME_AS_FRESH,
    # 6. which writegate release last applied each migration list, and through which
    # version (`checkpoints/migrate.py`): `writegate db status` shows it, and an older
    # release opening this database names it in its refusal.
    """
CREATE TABLE writegate.releases (
    migrations   text PRIMARY KEY,
    release      text NOT NULL,
    version      integer NOT NULL,
    migrated_at  timestamptz NOT NULL DEFAULT now()
);
""",
    # 7. the webhook outbox (checkpoints/outbox.py, docs/webhooks.md): a tenant's
    # endpoints, and one row per event and endpoint, written by triggers in the
    # transaction of the state change that caused it (so every writer emits, whichever
    # release it runs), and only for a tenant that has an endpoint. The event id is
    # derived from what happened (its type and the proposal or execution), so an event
    # is written once per endpoint however often its cause is seen.
    """
CREATE TABLE writegate.webhook_endpoints (
    endpoint_id      text PRIMARY KEY,
    tenant_id        text NOT NULL,
    url              text NOT NULL,
    secret           text NOT NULL,
    event_types      text[],
    expiring_within  interval NOT NULL DEFAULT '5 minutes',
    created_at       timestamptz NOT NULL DEFAULT now(),
    removed_at       timestamptz
);
CREATE INDEX webhook_endpoints_tenant_idx ON writegate.webhook_endpoints (tenant_id)
    WHERE removed_at IS NULL;

CREATE TABLE writegate.outbox (
    delivery_id      bigserial PRIMARY KEY,
    event_id         text NOT NULL,
    endpoint_id      text NOT NULL REFERENCES writegate.webhook_endpoints (endpoint_id),
    tenant_id        text NOT NULL,
    event_type       text NOT NULL,
    payload          jsonb NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    lease_owner      text,
    last_error       text,
    last_attempt_at  timestamptz,
    delivered_at     timestamptz,
    CONSTRAINT outbox_event_endpoint_key UNIQUE (event_id, endpoint_id)
);
CREATE INDEX outbox_due_idx ON writegate.outbox (next_attempt_at)
    WHERE delivered_at IS NULL;

CREATE FUNCTION writegate.event_id(event_type text, event_key text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT 'msg_' || md5(event_type || ':' || event_key) $$;

-- What every event says about its proposal: never a token, nor its hash.
CREATE FUNCTION writegate.proposal_data(p writegate.proposals) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('proposal_id', p.proposal_id, 'tenant_id', p.tenant_id,
        'thread_id', p.thread_id, 'requester', p.subject, 'operation', p.operation,
        'resource', p.resource, 'status', p.status, 'tier', p.tier,
        'created_at', p.created_at, 'expires_at', p.expires_at, 'preview', p.preview)
$$;

-- An event for each of the tenant's endpoints that takes its type.
CREATE FUNCTION writegate.emit_event(event_type text, event_key text, tenant_id text,
    data jsonb) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO writegate.outbox (event_id, endpoint_id, tenant_id, event_type, payload)
    SELECT writegate.event_id(emit_event.event_type, emit_event.event_key), e.endpoint_id,
        e.tenant_id, emit_event.event_type,
        jsonb_build_object('type', emit_event.event_type, 'timestamp', now(),
            'data', emit_event.data)
    FROM writegate.webhook_endpoints e
    WHERE e.tenant_id = emit_event.tenant_id AND e.removed_at IS NULL
        AND (e.event_types IS NULL OR emit_event.event_type = ANY (e.event_types))
    ON CONFLICT (event_id, endpoint_id) DO NOTHING;
END
$$;

-- A question waits for its requester, or for a second approver.
CREATE FUNCTION writegate.proposal_events() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM writegate.webhook_endpoints e
               WHERE e.tenant_id = NEW.tenant_id AND e.removed_at IS NULL) THEN
        PERFORM writegate.emit_event('proposal.' || NEW.status, NEW.proposal_id,
            NEW.tenant_id, writegate.proposal_data(NEW));
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER proposals_outbox_insert AFTER INSERT ON writegate.proposals
    FOR EACH ROW WHEN (NEW.status IN ('awaiting_confirmation', 'awaiting_second_approval'))
    EXECUTE FUNCTION writegate.proposal_events();
CREATE TRIGGER proposals_outbox_update AFTER UPDATE OF status ON writegate.proposals
    FOR EACH ROW WHEN (NEW.status IS DISTINCT FROM OLD.status
        AND NEW.status IN ('awaiting_confirmation', 'awaiting_second_approval'))
    EXECUTE FUNCTION writegate.proposal_events();

-- A write executed (with its receipt), or its outcome went to a person.
CREATE FUNCTION writegate.execution_events() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_data jsonb;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM writegate.webhook_endpoints e
                   WHERE e.tenant_id = NEW.tenant_id AND e.removed_at IS NULL) THEN
        RETURN NULL;
    END IF;
    SELECT writegate.proposal_data(p) INTO v_data
    FROM writegate.proposals p WHERE p.proposal_id = NEW.proposal_id;
    v_data := COALESCE(v_data, jsonb_build_object('proposal_id', NEW.proposal_id,
        'tenant_id', NEW.tenant_id, 'requester', NEW.subject, 'operation', NEW.operation,
        'resource', NEW.resource));
    IF NEW.status = 'succeeded' THEN
        v_data := v_data || jsonb_build_object('receipt', jsonb_build_object(
            'execution_id', NEW.execution_id, 'request_key', NEW.request_key,
            'operation', NEW.operation, 'status', NEW.status,
            'args_digest', NEW.args_digest, 'provider_ref', NEW.provider_ref,
            'completed_at', NEW.completed_at, 'result', COALESCE(NEW.result, '{}')));
    ELSE
        v_data := v_data || jsonb_build_object('execution_id', NEW.execution_id,
            'execution_status', NEW.status, 'escalation', NEW.escalation);
    END IF;
    PERFORM writegate.emit_event('execution.' || NEW.status, NEW.execution_id,
        NEW.tenant_id, v_data);
    RETURN NULL;
END
$$;
CREATE TRIGGER executions_outbox_insert AFTER INSERT ON writegate.executions
    FOR EACH ROW WHEN (NEW.status IN ('succeeded', 'escalated'))
    EXECUTE FUNCTION writegate.execution_events();
CREATE TRIGGER executions_outbox_update AFTER UPDATE OF status ON writegate.executions
    FOR EACH ROW WHEN (NEW.status IS DISTINCT FROM OLD.status
        AND NEW.status IN ('succeeded', 'escalated'))
    EXECUTE FUNCTION writegate.execution_events();

-- What the check after a promotion left for a person (approval/failover.py): the same
-- event as an escalated execution, for the tenant it names.
CREATE FUNCTION writegate.failover_escalation_events() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_data jsonb;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM writegate.webhook_endpoints e
                   WHERE e.tenant_id = NEW.tenant_id AND e.removed_at IS NULL) THEN
        RETURN NULL;
    END IF;
    SELECT writegate.proposal_data(p) INTO v_data
    FROM writegate.proposals p WHERE p.proposal_id = NEW.proposal_id;
    v_data := COALESCE(v_data, jsonb_build_object('proposal_id', NEW.proposal_id,
        'tenant_id', NEW.tenant_id, 'operation', NEW.operation))
        || jsonb_build_object('request_key', NEW.request_key, 'execution_status', 'escalated',
            'escalation', NEW.reason, 'after_failover', true);
    PERFORM writegate.emit_event('execution.escalated', 'failover:' || NEW.escalation_id,
        NEW.tenant_id, v_data);
    RETURN NULL;
END
$$;
CREATE TRIGGER failover_escalations_outbox AFTER INSERT ON writegate.failover_escalations
    FOR EACH ROW WHEN (NEW.tenant_id IS NOT NULL)
    EXECUTE FUNCTION writegate.failover_escalation_events();
""",
    # 8. pages by a key that never changes (approval/views.py, docs/paging.md): a
    # tenant's audit, or a thread's, or a tool's, in audit_id order; the second
    # approver's queue in (created_at, proposal_id) order. Indexes only.
    """
CREATE INDEX audit_page_idx ON writegate.audit (tenant_id, audit_id);
CREATE INDEX audit_thread_page_idx ON writegate.audit (thread_id, audit_id);
CREATE INDEX audit_tool_page_idx ON writegate.audit (tenant_id, tool_name, audit_id);
CREATE INDEX proposals_second_page_idx ON writegate.proposals (tenant_id, created_at, proposal_id)
    WHERE status = 'awaiting_second_approval';
""",
    # 9. a requester's own proposals a page at a time, in (created_at, proposal_id)
    # order (checkpoints/views.py, `GET /v1/approvals`). An index only: a process of the
    # previous release ignores it.
    """
CREATE INDEX proposals_mine_page_idx
    ON writegate.proposals (tenant_id, subject, created_at, proposal_id);
""",
    # 10. a token and an execution refer to their proposal (docs/protocol.md, "The rows"):
    # what the foreign key already holds is read from the proposal, never written again
    # by today's code. Expand only: the copied columns stay, NOT NULL, for the previous
    # release's processes, which still write and read them; the database fills them from
    # the proposal row before each insert, so they always say what the proposal says.
    # The open execution of a request is found through its executed proposal. Dropping
    # the copies is a later release's migration (docs/upgrading.md).
    """
CREATE FUNCTION writegate.token_from_proposal() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    SELECT p.subject, p.tenant_id, p.operation, p.resource, p.args_digest, p.digest_scheme,
        p.request_key, p.tier
    INTO NEW.subject, NEW.tenant_id, NEW.operation, NEW.resource, NEW.args_digest,
        NEW.digest_scheme, NEW.request_key, NEW.tier
    FROM writegate.proposals p WHERE p.proposal_id = NEW.proposal_id;
    RETURN NEW;
END
$$;
CREATE TRIGGER tokens_from_proposal BEFORE INSERT ON writegate.tokens
    FOR EACH ROW EXECUTE FUNCTION writegate.token_from_proposal();

CREATE FUNCTION writegate.execution_from_proposal() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    SELECT p.tenant_id, p.subject, p.operation, p.resource, p.args, p.args_digest,
        p.digest_scheme, p.fingerprint
    INTO NEW.tenant_id, NEW.subject, NEW.operation, NEW.resource, NEW.args, NEW.args_digest,
        NEW.digest_scheme, NEW.fingerprint
    FROM writegate.proposals p WHERE p.proposal_id = NEW.proposal_id;
    RETURN NEW;
END
$$;
CREATE TRIGGER executions_from_proposal BEFORE INSERT ON writegate.executions
    FOR EACH ROW EXECUTE FUNCTION writegate.execution_from_proposal();

CREATE INDEX proposals_executed_fp_idx ON writegate.proposals (tenant_id, fingerprint)
    WHERE status = 'executed';

-- Why each column a token or an execution keeps is its own (docs/protocol.md).
COMMENT ON COLUMN writegate.tokens.token_hash IS
    'the hash of the secret a client presents; the secret is never stored';
COMMENT ON COLUMN writegate.tokens.proposal_id IS
    'the proposal it was issued for, and so everything it is bound to';
COMMENT ON COLUMN writegate.tokens.audience IS
    'the policy''s audience at the confirm: a token for one service only';
COMMENT ON COLUMN writegate.tokens.policy_version IS
    'the policy it was confirmed under: a later policy may ask for a new confirm';
COMMENT ON COLUMN writegate.tokens.issued_at IS 'when the confirm issued it';
COMMENT ON COLUMN writegate.tokens.expires_at IS
    'its own lifetime (its tier''s), set at the confirm, within the proposal''s';
COMMENT ON COLUMN writegate.tokens.status IS 'issued, consumed or revoked';
COMMENT ON COLUMN writegate.tokens.consumed_at IS 'when its execution claimed it';
COMMENT ON COLUMN writegate.tokens.execution_id IS 'the execution that consumed it';
COMMENT ON COLUMN writegate.executions.proposal_id IS
    'the proposal it runs: operation, resource, arguments and digest come from there';
COMMENT ON COLUMN writegate.executions.token_hash IS 'the token the claim consumed';
COMMENT ON COLUMN writegate.executions.request_key IS
    'the key sent downstream and looked up by the reconciler; unique: the claim itself';
DO $$
DECLARE
    copied text;
BEGIN
    FOREACH copied IN ARRAY ARRAY['subject', 'tenant_id', 'operation', 'resource',
        'args_digest', 'digest_scheme', 'request_key', 'tier'] LOOP
        EXECUTE format('COMMENT ON COLUMN writegate.tokens.%I IS %L', copied,
            'the proposal''s, copied for 0.2.0 (filled by tokens_from_proposal): unread');
    END LOOP;
    FOREACH copied IN ARRAY ARRAY['tenant_id', 'subject', 'operation', 'resource', 'args',
        'args_digest', 'digest_scheme', 'fingerprint'] LOOP
        EXECUTE format('COMMENT ON COLUMN writegate.executions.%I IS %L', copied,
            'the proposal''s, copied for 0.2.0 (filled by executions_from_proposal): unread');
    END LOOP;
END
$$;
""",
]

# A database set up before the schema (its ledger in `public`, version 12 or later of
# that list, now `writegate.legacy_migrations`) becomes migration 1's shape: its rows
# are the ledger, so an unknown execution or a consumed token survives the upgrade.
LEGACY_ADOPTION = (
    """
DO $$
DECLARE
    legacy integer := (SELECT max(version) FROM public.writegate_migrations);
BEGIN
    IF legacy IS DISTINCT FROM 12 THEN
        RAISE EXCEPTION 'this database was set up by a writegate at version % of its old '
            'schema; only version 12 is adopted: upgrade it with the release that set it '
            'up first', legacy;
    END IF;
END
$$;
ALTER TABLE public.writegate_migrations SET SCHEMA writegate;
ALTER TABLE writegate.writegate_migrations RENAME TO legacy_migrations;
ALTER TABLE public.wg_proposals SET SCHEMA writegate;
ALTER TABLE writegate.wg_proposals RENAME TO proposals;
ALTER TABLE public.wg_tokens SET SCHEMA writegate;
ALTER TABLE writegate.wg_tokens RENAME TO tokens;
ALTER TABLE public.wg_executions SET SCHEMA writegate;
ALTER TABLE writegate.wg_executions RENAME TO executions;
ALTER TABLE public.wg_audit SET SCHEMA writegate;
ALTER TABLE writegate.wg_audit RENAME TO audit;
ALTER TABLE public.wg_tombstones SET SCHEMA writegate;
ALTER TABLE writegate.wg_tombstones RENAME TO tombstones;
ALTER TABLE public.wg_presented SET SCHEMA writegate;
ALTER TABLE writegate.wg_presented RENAME TO presented;
ALTER TABLE writegate.proposals ADD COLUMN message_id text NOT NULL DEFAULT '';
ALTER TABLE writegate.proposals ADD COLUMN decision_reason text;
ALTER TABLE writegate.proposals DROP CONSTRAINT wg_proposals_thread_id_tool_call_id_key;
ALTER TABLE writegate.proposals ADD CONSTRAINT proposals_call_key
    UNIQUE (thread_id, message_id, tool_call_id);
DROP FUNCTION public.wg_expect_rows(bigint, bigint, text);
"""
    + NAME_AS_FRESH
)

CORE = MigrationList(
    name="writegate",
    table="writegate.migrations",
    migrations=MIGRATIONS,
    legacy=("public.wg_proposals", LEGACY_ADOPTION),
)


def setup_database(url: str, *, schema: str = DEFAULT_SCHEMA) -> None:
    """Bring ``url`` up to date for the core: writegate's own tables, in `schema`, and
    LangGraph's checkpoint tables (set up once, wherever a user's saver has them)."""
    # PostgresSaver needs autocommit (its indexes are built CONCURRENTLY) and dict rows.
    with psycopg.connect(url, autocommit=True, prepare_threshold=0, row_factory=dict_row) as conn:
        # The checkpointer's setup races with itself, so hold the same key for
        # the whole setup; closing the connection releases it, even on error.
        with conn.cursor(row_factory=tuple_row) as cur:
            wait_for_lock(cur, TRY_SESSION_LOCK)
        apply_migrations(conn, CORE, schema=schema)  # the xact lock re-enters our session lock
        PostgresSaver(conn).setup()
