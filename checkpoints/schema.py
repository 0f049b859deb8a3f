"""The database schema, as an append-only list of migrations.

The position in `MIGRATIONS` is the version. Never edit or reorder an entry that has
shipped: add a new one. Ledger tables (proposals, tokens, executions, audit) carry the
protocol; `orders`, `refunds` and `tickets` are the demo domain; the `provider` schema
is the payment provider simulator's own store, kept apart as a real provider would be.
"""

from __future__ import annotations

from writegate.checkpoints.schema_http import HTTP
from writegate.checkpoints.schema_ops import OPS
from writegate.checkpoints.schema_tiers import TIERS

LEDGER = """
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
"""

DOMAIN = """
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
"""

PROVIDER = """
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
"""

# A write whose outcome is not final blocks a new proposal of the same request; the
# lookup covers retryable and escalated executions too.
UNSETTLED_INDEX = """
DROP INDEX IF EXISTS wg_executions_open_fp_idx;
CREATE INDEX wg_executions_unsettled_fp_idx ON wg_executions (tenant_id, fingerprint)
    WHERE status IN ('running', 'unknown', 'failed_retryable', 'escalated');
"""

# Versions 4-6 are defined beside their features; the order here is the version order.
MIGRATIONS: list[str] = [LEDGER, DOMAIN, PROVIDER, OPS, HTTP, TIERS, UNSETTLED_INDEX]
