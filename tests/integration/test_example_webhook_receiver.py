"""The example receiver: a waiting approval reaches a Slack-style stand-in as `{"text"}`,
once, however often it is delivered; an unsigned request is refused; a Slack outage
makes writegate send the event again."""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import httpx
import pytest

from examples.webhook_receiver import Receiver
from tests.integration.tier_helpers import new_order, open_runtime, propose_refund
from writegate.approval.events import DeliveryPolicy, Due, EventType
from writegate.approval.models import Identity
from writegate.checkpoints.outbox import PgOutbox
from writegate.runtime.wiring import Runtime
from writegate.surfaces.webhooks import deliverer, new_secret, signed_headers

TENANT = "tenant_slack"
WAITING = [EventType.AWAITING_CONFIRMATION.value, EventType.AWAITING_SECOND_APPROVAL.value]


class Slack(BaseHTTPRequestHandler):
    """The incoming-webhook stand-in: records each JSON body, answers `answers` first."""

    posted: ClassVar[list[dict[str, Any]]] = []
    answers: ClassVar[list[int]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        status = self.answers.pop(0) if self.answers else 200
        if status == 200:
            self.posted.append(body)
        self.send_response(status)
        self.send_header("content-length", "0")
        self.end_headers()


@pytest.fixture(scope="module")
def rt(create_database: Callable[[], str]) -> Iterator[Runtime]:
    with open_runtime(create_database) as runtime:
        yield runtime


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    slack = ThreadingHTTPServer(("127.0.0.1", 0), Slack)
    Slack.posted, Slack.answers = [], []
    threading.Thread(target=slack.serve_forever, daemon=True).start()
    secret = new_secret()
    example = Receiver(secret, f"http://127.0.0.1:{slack.server_address[1]}/services/T/B/X")
    yield example.start(), secret
    for server in (example, slack):
        server.shutdown()
        server.server_close()


def test_a_waiting_approval_reaches_slack_once(rt: Runtime, receiver) -> None:
    example, secret = receiver
    outbox = PgOutbox(rt.pool)
    outbox.add_endpoint(endpoint_id="ep_" + secrets.token_hex(5), tenant_id=TENANT,
                        url=example.url, secret=secret, event_types=WAITING)  # fmt: skip
    who = Identity("user_slack", TENANT)
    proposal = propose_refund(rt, new_order(rt, 60000, who), 60000, who)
    Slack.answers = [503]  # Slack is down for the first try
    worker, sender = deliverer(outbox, DeliveryPolicy(lease=5, timeout=3, backoff=0),
                               base_url="https://approvals.example.test")  # fmt: skip
    try:
        assert worker.run_once().failed == 1  # the receiver said 502: writegate retries
        assert worker.run_once().delivered == 1
        (row,) = outbox.deliveries(TENANT)
        outbox.replay(row["delivery_id"])  # the same message again: not forwarded twice
        assert worker.run_once().delivered == 1
    finally:
        sender.close()
    (posted,) = Slack.posted
    text = posted["text"]
    assert set(posted) == {"text"}
    assert "waits for its requester's confirmation" in text and "¥600.00" in text
    assert f"https://approvals.example.test/v1/approvals/{proposal.proposal_id}" in text


def test_an_unsigned_or_wrongly_signed_request_is_refused(receiver) -> None:
    example, _ = receiver
    body = json.dumps({"type": "proposal.awaiting_confirmation", "data": {}})
    forged = Due(1, "msg_forged", "proposal.awaiting_confirmation", "ep", example.url,
                 new_secret(), 1, {})  # fmt: skip
    for headers in ({}, signed_headers(forged, body, datetime.now(UTC))):
        answer = httpx.post(example.url, content=body, headers=headers, timeout=5)
        assert answer.status_code == 401
    assert Slack.posted == []
