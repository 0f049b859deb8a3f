"""The migration list writegate shipped before its tables moved into a schema of their
own: everything in `public`, the ledger (`wg_*`), the demo domain and the HTTP service
in one list. Kept only so that tests can build a database as that version left it and
check that today's writegate adopts it (`checkpoints/migrate.py`). Never applied by
writegate itself.
"""

from __future__ import annotations

LEGACY_MIGRATIONS: list[str] = [
    # 1. the ledger: proposals, tokens, executions, audit
    """
CREATE TABLE wg_proposals (
    proposal_id     text PRIMARY KEY,
    thread_id       text NOT NULL,
    tool_call_id    text NOT NULL,
    subject         text NOT NULL,
    tenant_id       text NOT NULL,
    operation       text NOT NULL,
    resource        text NOT NULL,
    args            jsonb NOT NULL,
    args_digest     text NOT NULL,
    fingerprint     text NOT NULL,
    state_version   bigint NOT NULL,
    preview         jsonb NOT NULL,
    policy_version  text NOT NULL,
    request_key     text NOT NULL UNIQUE,
    status          text NOT NULL CHECK (status IN ('awaiting_confirmation', 'confirmed',
                        'declined', 'cancelled', 'expired', 'superseded', 'revoked',
                        'executed')),
    superseded_by   text REFERENCES wg_proposals (proposal_id),
    decided_by      text,
    decided_at      timestamptz,
    created_at      timestamptz NOT NULL,
    expires_at      timestamptz NOT NULL,
    UNIQUE (thread_id, tool_call_id)
);
-- A user's pending approvals, and the sweep of stale ones, stay index scans at any size.
CREATE INDEX wg_proposals_pending_idx ON wg_proposals (tenant_id, subject, created_at)
    WHERE status IN ('awaiting_confirmation', 'confirmed');
CREATE INDEX wg_proposals_expiry_idx ON wg_proposals (expires_at)
    WHERE status = 'awaiting_confirmation';
CREATE INDEX wg_proposals_open_fp_idx ON wg_proposals (thread_id, fingerprint)
    WHERE status IN ('awaiting_confirmation', 'confirmed');

CREATE TABLE wg_tokens (
    token_hash      text PRIMARY KEY,
    proposal_id     text NOT NULL UNIQUE REFERENCES wg_proposals (proposal_id),
    subject         text NOT NULL,
    tenant_id       text NOT NULL,
    audience        text NOT NULL,
    operation       text NOT NULL,
    resource        text NOT NULL,
    args_digest     text NOT NULL,
    policy_version  text NOT NULL,
    request_key     text NOT NULL,
    issued_at       timestamptz NOT NULL,
    expires_at      timestamptz NOT NULL,
    status          text NOT NULL CHECK (status IN ('issued', 'consumed', 'revoked')),
    consumed_at     timestamptz,
    execution_id    text UNIQUE
);

CREATE TABLE wg_executions (
    execution_id      text PRIMARY KEY,
    request_key       text NOT NULL UNIQUE,
    token_hash        text NOT NULL UNIQUE REFERENCES wg_tokens (token_hash),
    proposal_id       text NOT NULL UNIQUE REFERENCES wg_proposals (proposal_id),
    tenant_id         text NOT NULL,
    subject           text NOT NULL,
    operation         text NOT NULL,
    resource          text NOT NULL,
    args              jsonb NOT NULL,
    args_digest       text NOT NULL,
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
    completed_at      timestamptz
);
-- Reconciliation picks up unknown, retryable and lease-expired work without a scan.
CREATE INDEX wg_executions_backlog_idx ON wg_executions (updated_at)
    WHERE status IN ('running', 'unknown', 'failed_retryable');
CREATE INDEX wg_executions_open_fp_idx ON wg_executions (tenant_id, fingerprint)
    WHERE status IN ('running', 'unknown');

CREATE TABLE wg_audit (
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
CREATE INDEX wg_audit_tenant_idx ON wg_audit (tenant_id, created_at);
CREATE INDEX wg_audit_thread_idx ON wg_audit (thread_id, created_at);
CREATE INDEX wg_audit_proposal_idx ON wg_audit (proposal_id);
""",
    # 2. the demo domain: orders, refunds, tickets
    """
CREATE TABLE orders (
    order_id        text PRIMARY KEY,
    tenant_id       text NOT NULL,
    user_id         text NOT NULL,
    currency        text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    payable_minor   bigint NOT NULL CHECK (payable_minor >= 0),
    refunded_minor  bigint NOT NULL DEFAULT 0 CHECK (refunded_minor >= 0),
    shipping_address text NOT NULL DEFAULT '',
    version         bigint NOT NULL DEFAULT 1,
    created_at      timestamptz NOT NULL DEFAULT now(),
    CHECK (refunded_minor <= payable_minor)
);
CREATE INDEX orders_owner_idx ON orders (tenant_id, user_id);

CREATE TABLE refunds (
    refund_id       text PRIMARY KEY,
    order_id        text NOT NULL REFERENCES orders (order_id),
    tenant_id       text NOT NULL,
    amount_minor    bigint NOT NULL CHECK (amount_minor > 0),
    currency        text NOT NULL,
    reason          text NOT NULL,
    request_key     text NOT NULL UNIQUE,
    status          text NOT NULL CHECK (status IN ('pending', 'succeeded', 'reversed')),
    provider_ref    text,
    created_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE tickets (
    ticket_id       text PRIMARY KEY,
    tenant_id       text NOT NULL,
    user_id         text NOT NULL,
    title           text NOT NULL,
    description     text NOT NULL,
    status          text NOT NULL CHECK (status IN ('open', 'in_progress', 'resolved',
                        'closed')),
    request_key     text UNIQUE,
    version         bigint NOT NULL DEFAULT 1,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX tickets_owner_idx ON tickets (tenant_id, user_id);
CREATE SEQUENCE ticket_number_seq START 1000;
""",
    # 3. the payment provider simulator's own store, in its own schema
    """
CREATE SCHEMA provider;
-- The simulator's idempotency store: one row per key, so a key never refunds twice.
CREATE TABLE provider.refunds (
    idempotency_key text PRIMARY KEY,
    provider_ref    text NOT NULL UNIQUE,
    order_id        text NOT NULL,
    amount_minor    bigint NOT NULL,
    currency        text NOT NULL,
    request_digest  text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);
""",
    # 4. operations: reconcile bookkeeping on executions, tombstones for purged rows, and the
    # partial indexes that keep the backlog pickup, escalations, purge and metrics index scans
    """
ALTER TABLE wg_executions
    ADD COLUMN checks         integer NOT NULL DEFAULT 0,
    ADD COLUMN next_check_at  timestamptz,
    ADD COLUMN reconciled_at  timestamptz,
    ADD COLUMN escalation     jsonb;

CREATE INDEX wg_executions_escalated_idx ON wg_executions (created_at)
    WHERE status = 'escalated';
CREATE INDEX wg_executions_reconciled_idx ON wg_executions (reconciled_at)
    WHERE reconciled_at IS NOT NULL;
CREATE INDEX wg_executions_purge_idx ON wg_executions (completed_at)
    WHERE status IN ('succeeded', 'failed_terminal');
CREATE INDEX wg_proposals_purge_idx ON wg_proposals (expires_at)
    WHERE status <> 'executed';

CREATE TABLE wg_tombstones (
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
CREATE INDEX wg_tombstones_call_idx ON wg_tombstones (thread_id, tool_call_id);

CREATE INDEX wg_audit_ops_idx ON wg_audit (event, tool_name, status, error_code)
    WHERE event IN ('execute', 'reconcile');
CREATE INDEX wg_audit_conflict_idx ON wg_audit (tool_name)
    WHERE error_code = 'idempotency_conflict';
""",
    # 5. the HTTP service: API keys (sha256 hashes only, one user, one tenant, roles), thread
    # ownership, and the answer each click's idempotency key got
    """
CREATE TABLE wg_api_keys (
    key_hash    text PRIMARY KEY,
    key_id      text NOT NULL UNIQUE,
    user_id     text NOT NULL,
    tenant_id   text NOT NULL,
    roles       text[] NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);

CREATE TABLE wg_http_threads (
    thread_id   text PRIMARY KEY,
    tenant_id   text NOT NULL,
    user_id     text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX wg_http_threads_owner_idx ON wg_http_threads (tenant_id, user_id, created_at);

CREATE TABLE wg_http_clicks (
    tenant_id        text NOT NULL,
    user_id          text NOT NULL,
    idempotency_key  text NOT NULL,
    proposal_id      text NOT NULL,
    request_digest   text NOT NULL,
    status_code      integer,
    response         jsonb,
    created_at       timestamptz NOT NULL DEFAULT now(),
    completed_at     timestamptz,
    PRIMARY KEY (tenant_id, user_id, idempotency_key)
);
-- A user's approval history across threads without a scan (the pending ones already
-- have a partial index; a thread's proposals use the (thread_id, tool_call_id) key).
CREATE INDEX wg_proposals_subject_idx ON wg_proposals (tenant_id, subject, created_at);
""",
    # 6. confirmation tiers: tier and risk on proposals, the second approver, revocation, the
    # awaiting_second_approval state (a requester may not approve their own request), and
    # batch_items, one row per item keyed by its derived request key
    """
ALTER TABLE wg_proposals
    ADD COLUMN tier               text NOT NULL DEFAULT 'one_click',
    ADD COLUMN risk               jsonb,
    ADD COLUMN second_approver    text,
    ADD COLUMN second_approved_at timestamptz,
    ADD COLUMN revoked_by         text,
    ADD COLUMN revoked_at         timestamptz;
ALTER TABLE wg_proposals DROP CONSTRAINT wg_proposals_status_check;
ALTER TABLE wg_proposals ADD CONSTRAINT wg_proposals_status_check CHECK (status IN (
    'awaiting_confirmation', 'awaiting_second_approval', 'confirmed', 'declined',
    'cancelled', 'expired', 'superseded', 'revoked', 'executed'));
ALTER TABLE wg_proposals ADD CONSTRAINT wg_proposals_not_self_approved
    CHECK (second_approver IS NULL OR second_approver <> subject);
-- What approvers of a tenant are waiting on, and the open-request lookup with the
-- new status included.
CREATE INDEX wg_proposals_second_idx ON wg_proposals (tenant_id, created_at)
    WHERE status = 'awaiting_second_approval';
CREATE INDEX wg_proposals_open3_fp_idx ON wg_proposals (thread_id, fingerprint)
    WHERE status IN ('awaiting_confirmation', 'awaiting_second_approval', 'confirmed');
DROP INDEX wg_proposals_open_fp_idx;  -- superseded by the one above

ALTER TABLE wg_tokens ADD COLUMN tier text NOT NULL DEFAULT 'one_click';

CREATE TABLE batch_items (
    request_key        text PRIMARY KEY,
    batch_request_key  text NOT NULL,
    tenant_id          text NOT NULL,
    item               text NOT NULL,
    status             text NOT NULL CHECK (status IN ('succeeded', 'failed')),
    result             jsonb NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    UNIQUE (batch_request_key, item)
);
""",
    # 7. an open execution of the same request blocks a new proposal: the lookup covers
    # retryable and escalated executions too
    """
DROP INDEX IF EXISTS wg_executions_open_fp_idx;
CREATE INDEX wg_executions_unsettled_fp_idx ON wg_executions (tenant_id, fingerprint)
    WHERE status IN ('running', 'unknown', 'failed_retryable', 'escalated');
""",
    # 8. questions that reached a client (an interrupt that ended its run): an answer
    # naming no proposal counts only for a question recorded here
    """
CREATE TABLE wg_presented (
    thread_id       text NOT NULL,
    checkpoint_ns   text NOT NULL,
    interrupt_index integer NOT NULL CHECK (interrupt_index >= 0),
    proposal_id     text NOT NULL REFERENCES wg_proposals (proposal_id) ON DELETE CASCADE,
    presented_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (thread_id, checkpoint_ns, interrupt_index)
);
CREATE INDEX wg_presented_proposal_idx ON wg_presented (proposal_id);
""",
    # 9. the digest scheme beside every stored digest: rows written before it keep the
    # legacy form; new rows name the RFC 8785 form (approval/canonical.py)
    """
ALTER TABLE wg_proposals ADD COLUMN digest_scheme text NOT NULL DEFAULT 'wg-c14n-1'
    CHECK (digest_scheme IN ('wg-c14n-1', 'jcs-sha256'));
ALTER TABLE wg_proposals ALTER COLUMN digest_scheme SET DEFAULT 'jcs-sha256';
ALTER TABLE wg_tokens ADD COLUMN digest_scheme text NOT NULL DEFAULT 'wg-c14n-1'
    CHECK (digest_scheme IN ('wg-c14n-1', 'jcs-sha256'));
ALTER TABLE wg_tokens ALTER COLUMN digest_scheme SET DEFAULT 'jcs-sha256';
ALTER TABLE wg_executions ADD COLUMN digest_scheme text NOT NULL DEFAULT 'wg-c14n-1'
    CHECK (digest_scheme IN ('wg-c14n-1', 'jcs-sha256'));
ALTER TABLE wg_executions ALTER COLUMN digest_scheme SET DEFAULT 'jcs-sha256';
""",
    # 10. the events of a turn's stream, kept a short while so a client that reconnects
    # (to any replica) gets the rest of them by `Last-Event-ID`
    """
CREATE TABLE wg_stream_events (
    stream_id   text NOT NULL,
    seq         integer NOT NULL CHECK (seq >= 0),
    thread_id   text NOT NULL,
    event       text NOT NULL,
    data        jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (stream_id, seq)
);
CREATE INDEX wg_stream_events_age_idx ON wg_stream_events (created_at);
""",
    # 11. the trace context of a proposal's life (W3C traceparent), so that every process
    # that later decides, executes or reconciles it continues one trace
    """
ALTER TABLE wg_proposals ADD COLUMN traceparent text;
""",
    # 12. a guarded write sent ahead of its answer (in one round trip with the statements
    # after it) checks its own row count, and fails its transaction if its guard failed
    """
CREATE FUNCTION wg_expect_rows(changed bigint, expected bigint, what text)
RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    IF changed <> expected THEN
        RAISE EXCEPTION 'writegate: % changed % rows, not %', what, changed, expected
            USING ERRCODE = 'WG001',
                  HINT = 'its guard no longer held; the transaction is rolled back';
    END IF;
    RETURN changed;
END
$$;
""",
]
