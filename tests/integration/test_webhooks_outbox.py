"""The webhook outbox on PostgreSQL: which state changes write which events, for whom,
in which transaction; the expiry warning once; the deliverer's signature, read back
with the `standardwebhooks` library; and `writegate webhooks` (add, list, remove,
failing, replay) through the CLI."""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
from standardwebhooks import Webhook
from typer.testing import CliRunner

from tests.integration.tier_helpers import (
    APPROVER,
    confirm,
    new_order,
    open_runtime,
    propose_refund,
    token_of,
)
from writegate.__main__ import command
from writegate.approval.errors import NotFound, ValidationFailed
from writegate.approval.events import DeliveryPolicy, EventType
from writegate.approval.models import Identity, ProposalStatus
from writegate.checkpoints.outbox import PgOutbox
from writegate.runtime.wiring import Runtime
from writegate.surfaces.webhooks import deliverer, new_secret

ROWS_SQL = """
SELECT o.event_id, o.event_type, o.endpoint_id, o.payload,
       writegate.event_id(o.event_type, COALESCE(o.payload #>> '{data,receipt,execution_id}',
           o.payload #>> '{data,execution_id}', o.payload #>> '{data,proposal_id}')) AS derived
FROM writegate.outbox o WHERE o.tenant_id = %s ORDER BY o.delivery_id"""


@pytest.fixture(scope="module")
def rt(create_database: Callable[[], str]) -> Iterator[Runtime]:
    with open_runtime(create_database) as runtime:
        yield runtime


class Tenant:
    """A tenant of its own per test, its user, and an endpoint (or more) of its own."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.id = "tenant_" + secrets.token_hex(4)
        self.user = Identity("user_" + secrets.token_hex(3), self.id)
        self.outbox = PgOutbox(rt.pool)

    def endpoint(self, url: str = "http://127.0.0.1:9/hooks", **options: Any) -> str:
        made = self.outbox.add_endpoint(
            endpoint_id="ep_" + secrets.token_hex(6), tenant_id=self.id, url=url,
            secret=options.pop("secret", new_secret()), **options,
        )  # fmt: skip
        return made.endpoint_id

    def refund(self, amount: int = 19900) -> Any:
        return propose_refund(self.rt, new_order(self.rt, amount, self.user), amount, self.user)

    def rows(self) -> list[dict[str, Any]]:
        with self.rt.pool.connection() as conn:
            return [dict(r) for r in conn.execute(ROWS_SQL, (self.id,)).fetchall()]

    def types(self, endpoint_id: str | None = None) -> list[str]:
        return [r["event_type"] for r in self.rows() if endpoint_id in (None, r["endpoint_id"])]


def test_a_tenant_without_an_endpoint_gets_no_outbox_rows(rt: Runtime) -> None:
    tenant = Tenant(rt)
    proposal = tenant.refund()
    rt.executor.execute(tenant.user, token_of(rt, proposal, who=tenant.user))
    assert tenant.rows() == []


def test_a_write_writes_its_question_and_its_receipt_for_its_own_tenant_only(rt) -> None:
    tenant, other = Tenant(rt), Tenant(rt)
    every = tenant.endpoint()
    receipts_only = tenant.endpoint(event_types=[EventType.SUCCEEDED.value])
    elsewhere = other.endpoint()
    proposal = tenant.refund()
    assert tenant.types() == tenant.types(every) == ["proposal.awaiting_confirmation"]
    token = token_of(rt, proposal, who=tenant.user)
    receipt = rt.executor.execute(tenant.user, token)
    assert tenant.types(every) == ["proposal.awaiting_confirmation", "execution.succeeded"]
    assert tenant.types(receipts_only) == ["execution.succeeded"]
    assert other.types(elsewhere) == []
    rows = tenant.rows()
    assert all(r["event_id"] == r["derived"] for r in rows)  # the id says what happened
    waiting, executed = (r["payload"] for r in rows if r["endpoint_id"] == every)
    assert waiting["type"] == "proposal.awaiting_confirmation"
    data = waiting["data"]
    assert (data["proposal_id"], data["requester"], data["tenant_id"]) == (
        proposal.proposal_id, tenant.user.user_id, tenant.id,
    )  # fmt: skip
    shown = {f["name"]: f["display"] for f in data["preview"]["fields"]}
    assert shown["amount_minor"] == "¥199.00"  # the display value the person read
    sent, got = receipt.to_dict(), executed["data"]["receipt"]
    for key in ("execution_id", "request_key", "provider_ref", "status", "args_digest"):
        assert got[key] == sent[key], key
    assert token not in json.dumps([r["payload"] for r in rows])  # never a token


def test_a_second_approval_needed_is_an_event_and_the_approved_write_its_receipt(rt) -> None:
    tenant = Tenant(rt)
    tenant.endpoint()
    proposal = tenant.refund(600000)
    assert confirm(rt, proposal, "6000", who=tenant.user).status is ProposalStatus.AWAITING_SECOND
    approver = Identity(APPROVER.user_id, tenant.id, APPROVER.roles)
    rt.service.approve_as_second(approver, proposal.proposal_id)
    rt.executor.execute(tenant.user, token_of(rt, proposal, who=tenant.user))
    assert tenant.types() == [
        "proposal.awaiting_confirmation",
        "proposal.awaiting_second_approval",
        "execution.succeeded",
    ]


def test_an_event_commits_or_rolls_back_with_the_state_change_that_caused_it(rt) -> None:
    tenant = Tenant(rt)
    tenant.endpoint()
    proposal = tenant.refund()
    move = """UPDATE writegate.proposals SET status = 'awaiting_second_approval'
        WHERE proposal_id = %s"""
    with pytest.raises(RuntimeError), rt.pool.connection() as conn, conn.transaction():
        conn.execute(move, (proposal.proposal_id,))
        assert len(tenant.rows()) == 1  # another connection sees nothing uncommitted
        raise RuntimeError("the transaction fails after the state change")
    assert tenant.types() == ["proposal.awaiting_confirmation"]
    with rt.pool.connection() as conn, conn.transaction():
        conn.execute(move, (proposal.proposal_id,))
    assert tenant.types() == ["proposal.awaiting_confirmation", "proposal.awaiting_second_approval"]


def test_an_approval_about_to_expire_is_warned_once_per_endpoint(rt) -> None:
    tenant = Tenant(rt)
    soon = tenant.endpoint(expiring_within=timedelta(days=1))
    late = tenant.endpoint(expiring_within=timedelta(seconds=1))  # it expires later than that
    tenant.refund()
    outbox = PgOutbox(rt.pool)
    written: list[int] = []
    scans = [threading.Thread(target=lambda: written.append(outbox.write_expiring()))
             for _ in range(4)]  # fmt: skip
    for scan in scans:
        scan.start()
    for scan in scans:
        scan.join()
    assert outbox.write_expiring() == 0
    assert tenant.types(soon) == ["proposal.awaiting_confirmation", "proposal.expiring"]
    assert tenant.types(late) == ["proposal.awaiting_confirmation"]
    assert sum(written) >= 1  # other tenants' proposals may be warned by the same scans


def test_an_outcome_escalated_to_a_person_is_an_event(rt) -> None:
    tenant = Tenant(rt)
    tenant.endpoint()
    proposal = tenant.refund()
    receipt = rt.executor.execute(tenant.user, token_of(rt, proposal, who=tenant.user))
    escalate = """UPDATE writegate.executions SET status = 'escalated',
        escalation = '{"reason": "the provider cannot tell"}' WHERE execution_id = %s"""
    with rt.pool.connection() as conn:
        conn.execute(escalate, (receipt.execution_id,))
    (_, _, escalated) = tenant.rows()
    assert escalated["event_type"] == "execution.escalated"
    data = escalated["payload"]["data"]
    assert data["escalation"] == {"reason": "the provider cannot tell"}
    assert data["preview"]["title"] and data["execution_id"] == receipt.execution_id


def test_what_the_check_after_a_failover_escalates_is_an_event_too(rt) -> None:
    tenant = Tenant(rt)
    tenant.endpoint()
    proposal = tenant.refund()
    found = """INSERT INTO writegate.failover_escalations
        (request_key, operation, tenant_id, proposal_id, timeline_id, reason)
        VALUES (%s, 'refund_order', %s, %s, 2, '{"why": "lost with the old primary"}')"""
    with rt.pool.connection() as conn:
        conn.execute(found, (proposal.request_key, tenant.id, proposal.proposal_id))
    (_, escalated) = tenant.rows()
    assert escalated["event_type"] == "execution.escalated"
    data = escalated["payload"]["data"]
    assert data["proposal_id"] == proposal.proposal_id
    assert data["request_key"] == proposal.request_key
    assert data["after_failover"] is True and data["escalation"]["why"]


def test_a_removed_endpoint_gets_nothing_more(rt) -> None:
    tenant = Tenant(rt)
    endpoint = tenant.endpoint()
    assert PgOutbox(rt.pool).remove_endpoint(endpoint, tenant_id="tenant_other") is False
    assert PgOutbox(rt.pool).remove_endpoint(endpoint) is True
    tenant.refund()
    assert tenant.rows() == []


# -- the deliverer in this process, against a receiver thread --------------------------


class Received(BaseHTTPRequestHandler):
    answers: ClassVar[list[int]] = []
    seen: ClassVar[list[tuple[dict[str, str], str]]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"])).decode()
        self.seen.append((dict(self.headers.items()), body))
        self.send_response(self.answers.pop(0) if self.answers else 204)
        self.send_header("content-length", "0")
        self.end_headers()


@pytest.fixture
def receiver(rt: Runtime) -> Iterator[str]:
    """A receiver thread, and an outbox where no earlier test's endpoint is due."""
    with rt.pool.connection() as conn:
        conn.execute("UPDATE writegate.webhook_endpoints SET removed_at = now()")
    server = ThreadingHTTPServer(("127.0.0.1", 0), Received)
    Received.answers, Received.seen = [], []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/in"
    server.shutdown()
    server.server_close()


def test_a_delivery_is_signed_per_standard_webhooks_and_keeps_its_id(rt, receiver) -> None:
    tenant = Tenant(rt)
    secret = new_secret()
    tenant.endpoint(receiver, secret=secret, event_types=[EventType.AWAITING_CONFIRMATION.value])
    proposal = tenant.refund()
    Received.answers = [500]
    policy = DeliveryPolicy(lease=5, timeout=2, backoff=0)
    worker, sender = deliverer(PgOutbox(rt.pool), policy, base_url="https://wg.example.test/")
    try:
        rounds = [worker.run_once(), worker.run_once()]
    finally:
        sender.close()
    assert [(r.delivered, r.failed) for r in rounds] == [(0, 1), (1, 0)]
    (first_headers, _), (headers, body) = Received.seen
    assert headers["webhook-id"] == first_headers["webhook-id"]  # a retry is the same message
    event = Webhook(secret).verify(body, headers)  # raises if the signature does not hold
    assert event["type"] == "proposal.awaiting_confirmation"
    assert event["data"]["link"] == f"https://wg.example.test/v1/approvals/{proposal.proposal_id}"
    with pytest.raises(Exception, match="signature"):
        Webhook(new_secret()).verify(body, headers)


# -- `writegate webhooks` --------------------------------------------------------------


@pytest.fixture
def cli(rt: Runtime) -> Callable[..., Any]:
    app, runner = command(), CliRunner()

    def invoke(*args: str) -> Any:
        return runner.invoke(app, ["webhooks", *args], env={"DATABASE_URL": rt.pool.conninfo})

    return invoke


def test_the_cli_adds_lists_and_removes_a_tenants_endpoint(rt, cli) -> None:
    tenant = "tenant_" + secrets.token_hex(4)
    added = cli("add", "https://hooks.example.test/in", "--tenant", tenant, "--json")
    assert added.exit_code == 0, added.output
    made = json.loads(added.output)
    assert made["secret"].startswith("whsec_") and Webhook(made["secret"])
    listed = json.loads(cli("list", "--tenant", tenant, "--json").output)
    assert [e["endpoint_id"] for e in listed] == [made["endpoint_id"]]
    assert "secret" not in listed[0]
    assert cli("remove", made["endpoint_id"]).exit_code == 0
    assert json.loads(cli("list", "--tenant", tenant, "--json").output) == []
    assert isinstance(cli("remove", made["endpoint_id"]).exception, NotFound)


def test_the_cli_refuses_a_bad_url_or_event_type_and_writes_nothing(rt, cli) -> None:
    tenant = "tenant_" + secrets.token_hex(4)
    for args in (["ftp://hooks.example.test"], ["https://x.test", "--event", "proposal.nope"]):
        refused = cli("add", *args, "--tenant", tenant)
        assert isinstance(refused.exception, ValidationFailed), refused.output
        assert refused.exception.to_dict()["code"] == "validation_failed"
    assert PgOutbox(rt.pool).endpoints(tenant) == []


def test_the_cli_lists_failing_deliveries_and_replays_one(rt, cli, receiver) -> None:
    tenant = Tenant(rt)
    tenant.endpoint(receiver, event_types=[EventType.AWAITING_CONFIRMATION.value])
    tenant.refund()
    Received.answers = [503, 503, 503]
    outbox = PgOutbox(rt.pool)
    worker, sender = deliverer(outbox, DeliveryPolicy(lease=5, timeout=2, backoff=3600))
    try:
        worker.run_once()
        (row,) = outbox.deliveries(tenant.id)
        for _ in range(2):  # due again only when replayed: the backoff is an hour
            assert cli("replay", str(row["delivery_id"])).exit_code == 0
            worker.run_once()
        failing = json.loads(cli("failing", "--tenant", tenant.id, "--json").output)
        assert [(f["delivery_id"], f["attempts"], f["last_error"]) for f in failing] == [
            (row["delivery_id"], 3, "HTTP 503")
        ]
        assert cli("replay", str(row["delivery_id"])).exit_code == 0
        assert worker.run_once().delivered == 1
    finally:
        sender.close()
    assert json.loads(cli("failing", "--tenant", tenant.id, "--json").output) == []
    assert len({h["webhook-id"] for h, _ in Received.seen}) == 1 and len(Received.seen) == 4
    assert isinstance(cli("replay", "999999999").exception, NotFound)


def test_every_webhooks_subcommand_has_help(cli) -> None:
    for sub in ([], ["add"], ["list"], ["remove"], ["failing"], ["replay"], ["deliver"]):
        shown = cli(*sub, "--help")
        assert shown.exit_code == 0 and "Usage" in shown.output, (sub, shown.output)
