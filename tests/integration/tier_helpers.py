"""Shared setup for the tier, batch and revocation tests on PostgreSQL."""

from __future__ import annotations

import secrets
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from tests.app_db import setup_app
from writegate.approval.decisions import Confirm
from writegate.approval.execution import Executor
from writegate.approval.models import Identity, Proposal
from writegate.approval.policy import Policy, parse_policy
from writegate.approval.service import ApprovalService, Confirmation
from writegate.demo.batch import close_tickets
from writegate.demo.policy import DEMO_POLICY_FILE
from writegate.demo.runtime import open_demo
from writegate.runtime.wiring import Runtime

TENANT = "tenant_hz"
REQUESTER = Identity("user_42", TENANT)
APPROVER = Identity("lead_1", TENANT, frozenset({"approver"}))

INSERT_ORDER_SQL = """
INSERT INTO orders (order_id, tenant_id, user_id, currency, payable_minor, shipping_address)
VALUES (%s, %s, %s, 'CNY', %s, '')"""
TOKENS_SQL = "SELECT count(*) AS n FROM writegate.tokens WHERE proposal_id = %s"
REFUNDS_SQL = "SELECT count(*) AS n FROM provider.refunds WHERE order_id = %s"


class PinnedClock:
    """The ledger's clock, pinned when a test needs an exact instant."""

    def __init__(self) -> None:
        self.at: datetime | None = None

    def __call__(self) -> datetime:
        assert self.at is not None
        return self.at


@contextmanager
def open_runtime(create_database: Callable[[], str], **options: Any) -> Iterator[Runtime]:
    """A fresh database and a Runtime under the demo's policy, with the batch tool."""
    url = create_database()
    setup_app(url)
    runtime = open_demo(url, setup=False, **options).runtime
    if "close_tickets" not in runtime.registry:
        runtime.registry.register(close_tickets.spec)
    try:
        yield runtime
    finally:
        runtime.close()


def demo_policy_data() -> dict[str, Any]:
    """The demo's policy file, as data (the shipped one lists none of its operations)."""
    with DEMO_POLICY_FILE.open("rb") as handle:
        return tomllib.load(handle)


def policy_with(version: str, **tier_floors: int) -> Policy:
    """The demo's policy under another version, with some tiers' min_score moved."""
    data = demo_policy_data()
    data["version"] = version
    for tier in data["tiers"]:
        tier["min_score"] = tier_floors.get(tier["name"], tier["min_score"])
    return parse_policy(data)


def executor_under(runtime: Runtime, policy: Policy) -> Executor:
    return Executor(ApprovalService(runtime.store, runtime.registry, policy))


def new_order(runtime: Runtime, payable_minor: int, owner: Identity = REQUESTER) -> str:
    order_id = "ord_t" + secrets.token_hex(5)
    with runtime.pool.connection() as conn:
        conn.execute(INSERT_ORDER_SQL, (order_id, owner.tenant_id, owner.user_id, payable_minor))
    return order_id


def refund_args(order_id: str, amount: int) -> dict[str, Any]:
    return {"order_id": order_id, "amount_minor": amount, "currency": "CNY",
            "reason": "arrived broken"}  # fmt: skip


def propose_refund(
    runtime: Runtime, order_id: str, amount: int, who: Identity = REQUESTER
) -> Proposal:
    return runtime.service.propose(
        who,
        thread_id="th_" + secrets.token_hex(4),
        tool_call_id="call_" + secrets.token_hex(4),
        tool_name="refund_order",
        raw_args=refund_args(order_id, amount),
    )


def confirm(
    runtime: Runtime, proposal: Proposal, retyped: str | None = None, who: Identity = REQUESTER
) -> Any:
    """A Confirmation, or the Proposal itself while it awaits a second approver."""
    decision = Confirm(action="confirm", proposal_id=proposal.proposal_id, retyped=retyped)
    return runtime.service.decide(who, decision)


def token_of(
    runtime: Runtime, proposal: Proposal, retyped: str | None = None, who: Identity = REQUESTER
) -> str:
    confirmation = confirm(runtime, proposal, retyped, who)
    assert isinstance(confirmation, Confirmation), confirmation
    return confirmation.token


def tokens_of(runtime: Runtime, proposal_id: str) -> int:
    with runtime.pool.connection() as conn:
        row = conn.execute(TOKENS_SQL, (proposal_id,)).fetchone()
    return int(row["n"]) if row else 0


def refunds_of(runtime: Runtime, order_id: str) -> int:
    with runtime.pool.connection() as conn:
        row = conn.execute(REFUNDS_SQL, (order_id,)).fetchone()
    return int(row["n"]) if row else 0


def server_now(runtime: Runtime) -> datetime:
    with runtime.pool.connection() as conn:
        row = conn.execute("SELECT now() AS now").fetchone()
    assert row is not None
    return row["now"]  # type: ignore[no-any-return]
