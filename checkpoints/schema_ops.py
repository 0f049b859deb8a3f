"""Schema additions for operations: reconciliation bookkeeping, tombstones, metric indexes.

One append-only migration entry. Once shipped, never edit it: append a new one.

- `wg_executions` gains what the reconciler needs: how many times it checked a row,
  when it may check again (backoff), when it settled it, and why it escalated it.
- `wg_tombstones` remembers every request key, token and tool call whose ledger rows
  the retention purge removed, so a late retry is refused instead of treated as new.
- Partial indexes keep the backlog pickup, the escalation list, the purge and the
  metrics queries index scans however large the ledger grows.
"""

from __future__ import annotations

OPS = """
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
"""
