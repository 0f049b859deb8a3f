"""Schema additions for the tiers feature (one append-only migration entry).

Proposals gain their tier and risk assessment, the second approver and the revocation;
a new status sits between the requester's confirmation and the second approval. The
database itself refuses a requester approving their own request. `batch_items` holds
one row per item of a batch execution, keyed by the item's derived request key, so an
item is applied at most once and keeps its own receipt.
"""

from __future__ import annotations

# Once shipped, never edit: append a new migration instead.
TIERS = """
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
"""
