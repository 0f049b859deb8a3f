"""The deliverer's round: claim due deliveries, send each, then record the answer.

A row is claimed under a lease (its next attempt moved past the lease), sent, and only
then marked delivered: a deliverer killed between the send and the mark leaves a row
that is sent again once its lease ends, under the same event id (the `webhook-id` a
receiver deduplicates by). At least once: nothing is marked before the endpoint
answered 2xx. Any number of deliverers share the outbox (SKIP LOCKED in the claim).
"""

from __future__ import annotations

from collections.abc import Callable

from writegate.approval.events import DeliveryPolicy, Due, Round, Sent
from writegate.approval.store import OutboxStore

Send = Callable[[Due], Sent]


class Deliverer:
    """Claims due deliveries, sends each, then records what the endpoint answered."""

    def __init__(self, outbox: OutboxStore, send: Send, owner: str, policy: DeliveryPolicy):
        self.outbox = outbox
        self.send = send
        self.owner = owner
        self.policy = policy

    def run_once(self, limit: int = 50) -> Round:
        expiring = self.outbox.write_expiring()
        due = self.outbox.claim_due(self.owner, lease_seconds=self.policy.lease, limit=limit)
        delivered = failed = 0
        for item in due:
            sent = self.send(item)
            if sent.accepted:
                self.outbox.mark_delivered(item.delivery_id)
                delivered += 1
            else:
                retry = self.policy.retry_in(item.attempts)
                self.outbox.mark_failed(item.delivery_id, self.owner, sent.describe(), retry)
                failed += 1
        return Round(expiring=expiring, delivered=delivered, failed=failed)
