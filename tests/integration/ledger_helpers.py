"""Shared setup for the PostgreSQL protocol tests: a runtime and fresh orders."""

from __future__ import annotations

import secrets
from typing import Any

from writegate.approval.decisions import Confirm
from writegate.approval.models import Identity, Proposal
from writegate.approval.service import Confirmation
from writegate.runtime.wiring import Runtime

ALICE = Identity("user_42", "tenant_hz")

INSERT_ORDER_SQL = """
INSERT INTO orders (order_id, tenant_id, user_id, currency, payable_minor, shipping_address)
VALUES (%s, %s, %s, %s, %s, 'test address')"""
SELECT_ORDER_SQL = "SELECT refunded_minor, version FROM orders WHERE order_id = %s"
COUNT_LEDGER_SQL = "SELECT count(*) AS n FROM writegate.executions WHERE resource = %s"


def new_order(
    rt: Runtime, *, owner: Identity = ALICE, payable: int = 19900, currency: str = "CNY"
) -> str:
    order_id = "ord_t" + secrets.token_hex(5)
    with rt.pool.connection() as conn:
        conn.execute(
            INSERT_ORDER_SQL, (order_id, owner.tenant_id, owner.user_id, currency, payable)
        )
    return order_id


def refund_args(order_id: str, amount: int = 19900, currency: str = "CNY") -> dict[str, Any]:
    return {
        "order_id": order_id,
        "amount_minor": amount,
        "currency": currency,
        "reason": "item arrived broken",
    }


def propose_refund(
    rt: Runtime,
    order_id: str,
    *,
    who: Identity = ALICE,
    amount: int = 19900,
    thread: str | None = None,
) -> Proposal:
    return rt.service.propose(
        who,
        thread_id=thread or "th_" + secrets.token_hex(4),
        tool_call_id="call_" + secrets.token_hex(4),
        tool_name="refund_order",
        raw_args=refund_args(order_id, amount),
    )


def confirm(rt: Runtime, proposal: Proposal, who: Identity = ALICE) -> Confirmation:
    result = rt.service.decide(who, Confirm(action="confirm", proposal_id=proposal.proposal_id))
    assert isinstance(result, Confirmation)
    return result


def order_state(rt: Runtime, order_id: str) -> dict[str, Any]:
    with rt.pool.connection() as conn:
        row = conn.execute(SELECT_ORDER_SQL, (order_id,)).fetchone()
    assert row is not None
    return dict(row)


def ledger_count(rt: Runtime, order_id: str) -> int:
    with rt.pool.connection() as conn:
        row = conn.execute(COUNT_LEDGER_SQL, (f"order:{order_id}",)).fetchone()
    return int(row["n"]) if row else 0
