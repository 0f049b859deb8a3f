"""Schema addition for answers that name no proposal (one append-only migration entry).

`wg_presented` holds one row per approval question that reached a client: the question
is the interrupt at `interrupt_index` of the task at `checkpoint_ns` of a thread, and it
asked about `proposal_id`. A row is written only when the interrupt ended its run, so a
question raised and answered inside one run never has one.
"""

from __future__ import annotations

# Once shipped, never edit: append a new migration instead.
PRESENTED = """
CREATE TABLE wg_presented (
    thread_id       text NOT NULL,
    checkpoint_ns   text NOT NULL,
    interrupt_index integer NOT NULL CHECK (interrupt_index >= 0),
    proposal_id     text NOT NULL REFERENCES wg_proposals (proposal_id) ON DELETE CASCADE,
    presented_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (thread_id, checkpoint_ns, interrupt_index)
);
CREATE INDEX wg_presented_proposal_idx ON wg_presented (proposal_id);
"""
