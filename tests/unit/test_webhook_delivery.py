"""The deliverer's round and its rules, on a fake outbox: nothing is marked before the
endpoint accepted, a failure waits its backoff, and the body carries the link."""

from __future__ import annotations

import json
from typing import Any

from writegate.approval.delivery import Deliverer
from writegate.approval.events import DeliveryPolicy, Due, Sent, approval_link, body_of


def due(delivery_id: int = 1, attempts: int = 1) -> Due:
    payload = {"type": "proposal.awaiting_confirmation", "timestamp": "t",
               "data": {"proposal_id": "prop_1", "preview": {"fields": []}}}  # fmt: skip
    return Due(delivery_id, "msg_1", payload["type"], "ep_1", "http://x.test", "whsec_x",
               attempts, payload)  # fmt: skip


class Outbox:
    def __init__(self, items: list[Due]) -> None:
        self.items = items
        self.calls: list[tuple[Any, ...]] = []

    def write_expiring(self) -> int:
        self.calls.append(("write_expiring",))
        return 0

    def claim_due(self, owner: str, *, lease_seconds: float, limit: int) -> list[Due]:
        self.calls.append(("claim", owner, lease_seconds))
        items, self.items = self.items, []
        return items

    def mark_delivered(self, delivery_id: int) -> None:
        self.calls.append(("delivered", delivery_id))

    def mark_failed(self, delivery_id: int, owner: str, error: str, retry_in: float) -> None:
        self.calls.append(("failed", delivery_id, error, retry_in))


def test_each_delivery_is_marked_only_after_its_answer() -> None:
    outbox = Outbox([due(1), due(2, attempts=3)])
    order: list[str] = []

    def send(item: Due) -> Sent:
        order.append(f"send {item.delivery_id}")
        return Sent(204) if item.delivery_id == 1 else Sent(None, "ConnectError: refused")

    policy = DeliveryPolicy(lease=30, backoff=2, backoff_max=60)
    done = Deliverer(outbox, send, "me", policy).run_once()
    assert (done.delivered, done.failed) == (1, 1)
    assert outbox.calls == [
        ("write_expiring",),
        ("claim", "me", 30),
        ("delivered", 1),
        ("failed", 2, "ConnectError: refused", 8),
    ]


def test_the_backoff_doubles_up_to_its_ceiling() -> None:
    policy = DeliveryPolicy(backoff=5, backoff_max=60)
    assert [policy.retry_in(n) for n in range(1, 7)] == [5, 10, 20, 40, 60, 60]


def test_only_a_2xx_answer_is_an_acceptance() -> None:
    assert [Sent(s).accepted for s in (200, 204, 299, 301, 410, 500)] == [True] * 3 + [False] * 3
    assert not Sent(None, "ReadTimeout").accepted and Sent(503).describe() == "HTTP 503"


def test_the_body_carries_the_link_under_the_public_url() -> None:
    body = json.loads(body_of(due(), "https://wg.example.test/"))
    assert body["data"]["link"] == "https://wg.example.test/v1/approvals/prop_1"
    assert json.loads(body_of(due(), None))["data"]["link"] is None
    assert approval_link("https://a.test", None) is None


def test_a_secret_the_library_cannot_read_sends_nothing_and_says_why() -> None:
    from writegate.surfaces.webhooks import HttpSender

    sender = HttpSender(DeliveryPolicy(timeout=1))
    try:
        for secret in ("whsec_", "whsec_not*base64!"):
            item = Due(1, "msg_1", "t", "ep_1", "http://127.0.0.1:9/", secret, 1, {})
            sent = sender(item)
            assert not sent.accepted and "whsec_" in sent.describe()
    finally:
        sender.close()
