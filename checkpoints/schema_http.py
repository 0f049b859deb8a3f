"""Schema additions for the HTTP service (one append-only migration entry).

API keys are stored only as their sha256 hash, each mapped to one user, one tenant
and a set of roles. A thread opened over HTTP belongs to the user who opened it. A
click's idempotency key remembers the answer the click got, so a retried click is
answered the same way instead of deciding twice. Once shipped, never edit: append.
"""

from __future__ import annotations

HTTP = """
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
"""
