"""Orders: the two reads, and what the refund (demo/refunds.py) needs of an order.

An order belongs to one user of one tenant; anyone else is told it does not exist.
`order_view` adds the refundable balance and the display amounts to a row.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from writegate import Identity, NotFound, format_minor, read_tool

SELECT_ORDER_SQL = """
SELECT order_id, currency, payable_minor, refunded_minor, shipping_address, version
FROM orders WHERE order_id = %s AND tenant_id = %s AND user_id = %s
"""
LIST_ORDERS_SQL = """
SELECT order_id, currency, payable_minor, refunded_minor, shipping_address, version
FROM orders WHERE tenant_id = %s AND user_id = %s
ORDER BY created_at, order_id LIMIT 100
"""


def order_view(row: dict[str, Any]) -> dict[str, Any]:
    refundable = row["payable_minor"] - row["refunded_minor"]
    currency = row["currency"]
    return {
        "order_id": row["order_id"],
        "currency": currency,
        "payable_minor": row["payable_minor"],
        "refunded_minor": row["refunded_minor"],
        "refundable_minor": refundable,
        "payable_display": format_minor(row["payable_minor"], currency),
        "refunded_display": format_minor(row["refunded_minor"], currency),
        "refundable_display": format_minor(refundable, currency),
        "shipping_address": row["shipping_address"],
        "version": row["version"],
    }


def own_order(conn: Any, identity: Identity, order_id: str) -> dict[str, Any]:
    """The caller's own order; anyone else's is reported missing, so existence never leaks."""
    params = (order_id, identity.tenant_id, identity.user_id)
    row = conn.execute(SELECT_ORDER_SQL, params).fetchone()
    if row is None:
        raise NotFound("no such order for this user", order_id=order_id)
    return order_view(row)


OrderId = Annotated[
    str, Field(min_length=1, max_length=64, description="The order id, e.g. ord_1001.")
]


@read_tool
def get_order(order_id: OrderId, *, identity: Identity, conn: Any) -> dict[str, Any]:
    """Look up one of the user's orders: amounts paid, refunded and still refundable
    (in minor units and for display), currency and version."""
    return own_order(conn, identity, order_id)


@read_tool
def list_orders(*, identity: Identity, conn: Any) -> dict[str, Any]:
    """List the user's orders (at most 100) with their refundable balances."""
    rows = conn.execute(LIST_ORDERS_SQL, (identity.tenant_id, identity.user_id)).fetchall()
    return {"orders": [order_view(row) for row in rows]}
