"""Demo data: one tenant, two users, a few orders and tickets.

`seed_demo` only inserts what is missing, so it can run on every start; `reset_demo`
removes the demo rows (and what the demo created for the demo users) so a rerun of the
demo starts from the seeded state. Neither touches any other tenant's rows.
`writegate demo` refunds orders of its own (`create_demo_order`, ids `ord_demo…`), so
the walkthrough orders stay as seeded for chat, curl, the SDK and the notebooks.

"More than demo data" (`foreign_rows`) means any of: an order or ticket of another
tenant, a demo-tenant order whose id is neither seeded nor `ord_demo…`, a demo-tenant
ticket of a user who is not a demo user, or a proposal of another tenant.
"""

from __future__ import annotations

import uuid
from typing import Any

from psycopg.rows import tuple_row

DEMO_TENANT = "tenant_hz"
DEMO_USERS = ("user_42", "user_7")
DEMO_ORDER_IDS = ("ord_1001", "ord_1002", "ord_2002")
DEMO_TICKET_IDS = ("tkt_000001", "tkt_000002")
# The demo command's own orders: this prefix plus 8 hex digits, one set per run.
DEMO_RUN_ORDER_PREFIX = "ord_demo"
_RUN_ORDER_LIKE = DEMO_RUN_ORDER_PREFIX.replace("_", "\\_") + "%"  # '_' is a LIKE wildcard

# (order_id, user_id, currency, payable_minor, shipping_address)
DEMO_ORDERS = (
    ("ord_1001", "user_42", "CNY", 19900, "杭州云栖路 88 号"),
    ("ord_1002", "user_42", "USD", 4500, "1 Market St, San Francisco"),
    ("ord_2002", "user_7", "CNY", 5000, "杭州文三路 12 号"),
)
# (ticket_id, user_id, title, description, status)
DEMO_TICKETS = (
    ("tkt_000001", "user_42", "VPN connection fails",
     "The office VPN drops the connection a few seconds after connecting.", "open"),
    ("tkt_000002", "user_42", "Invoice shows the wrong company name",
     "The March invoice is addressed to the wrong company.", "in_progress"),
)  # fmt: skip

INSERT_DEMO_ORDER_SQL = """
INSERT INTO orders (order_id, tenant_id, user_id, currency, payable_minor, refunded_minor,
                    shipping_address, version)
VALUES (%s, %s, %s, %s, %s, 0, %s, 1)
ON CONFLICT (order_id) DO NOTHING
"""
INSERT_DEMO_TICKET_SQL = """
INSERT INTO tickets (ticket_id, tenant_id, user_id, title, description, status, version)
VALUES (%s, %s, %s, %s, %s, %s, 1)
ON CONFLICT (ticket_id) DO NOTHING
"""
# The seeded orders plus the demo command's own ones, in the demo tenant.
DEMO_ORDER_IDS_SQL = """
SELECT order_id FROM orders
WHERE tenant_id = %s AND (order_id = ANY(%s) OR order_id LIKE %s)
"""
DELETE_DEMO_PROVIDER_REFUNDS_SQL = "DELETE FROM provider.refunds WHERE order_id = ANY(%s)"
DELETE_DEMO_REFUNDS_SQL = "DELETE FROM refunds WHERE tenant_id = %s AND order_id = ANY(%s)"
DELETE_DEMO_ORDERS_SQL = "DELETE FROM orders WHERE tenant_id = %s AND order_id = ANY(%s)"
INSERT_RUN_ORDER_SQL = """
INSERT INTO orders (order_id, tenant_id, user_id, currency, payable_minor, refunded_minor,
                    shipping_address, version)
VALUES (%s, %s, %s, %s, %s, 0, %s, 1)
"""
FOREIGN_ROWS_SQL = """
SELECT
  (SELECT count(*) FROM orders
    WHERE tenant_id <> %(tenant)s
       OR NOT (order_id = ANY(%(orders)s) OR order_id LIKE %(run_orders)s))
+ (SELECT count(*) FROM tickets WHERE tenant_id <> %(tenant)s OR NOT user_id = ANY(%(users)s))
+ (SELECT count(*) FROM writegate.proposals WHERE tenant_id <> %(tenant)s)
"""
DEMO_ROWS_SQL = "SELECT count(*) FROM orders WHERE tenant_id = %s AND order_id = ANY(%s)"
# Seeded tickets, plus the ones the demo users created while the demo ran.
DELETE_DEMO_TICKETS_SQL = """
DELETE FROM tickets
WHERE tenant_id = %s AND (ticket_id = ANY(%s) OR (user_id = ANY(%s) AND request_key IS NOT NULL))
"""


def seed_demo(conn: Any) -> None:
    """Insert the demo orders and tickets that are missing; existing rows are left as they are."""
    with conn.transaction():
        for order_id, user_id, currency, payable, address in DEMO_ORDERS:
            conn.execute(
                INSERT_DEMO_ORDER_SQL,
                (order_id, DEMO_TENANT, user_id, currency, payable, address),
            )
        for ticket_id, user_id, title, description, status in DEMO_TICKETS:
            conn.execute(
                INSERT_DEMO_TICKET_SQL,
                (ticket_id, DEMO_TENANT, user_id, title, description, status),
            )


def reset_demo(conn: Any) -> None:
    """Delete the demo rows, including the simulator's refunds for the demo orders."""
    tickets, users = list(DEMO_TICKET_IDS), list(DEMO_USERS)
    with conn.transaction():
        found = _tuples(conn).execute(DEMO_ORDER_IDS_SQL, _demo_order_match()).fetchall()
        orders = [row[0] for row in found]
        conn.execute(DELETE_DEMO_PROVIDER_REFUNDS_SQL, (orders,))
        conn.execute(DELETE_DEMO_REFUNDS_SQL, (DEMO_TENANT, orders))
        conn.execute(DELETE_DEMO_ORDERS_SQL, (DEMO_TENANT, orders))
        conn.execute(DELETE_DEMO_TICKETS_SQL, (DEMO_TENANT, tickets, users))


def _tuples(conn: Any) -> Any:
    """A cursor with plain tuple rows, whatever row factory the connection has."""
    return conn.cursor(row_factory=tuple_row)


def _demo_order_match() -> tuple[str, list[str], str]:
    return (DEMO_TENANT, list(DEMO_ORDER_IDS), _RUN_ORDER_LIKE)


def create_demo_order(conn: Any, user_id: str, currency: str, payable_minor: int) -> str:
    """Insert a fresh order for one demo run and return its id (`ord_demo` + 8 hex)."""
    order_id = f"{DEMO_RUN_ORDER_PREFIX}{uuid.uuid4().hex[:8]}"
    address = "杭州云栖路 88 号"
    with conn.transaction():
        conn.execute(
            INSERT_RUN_ORDER_SQL,
            (order_id, DEMO_TENANT, user_id, currency, payable_minor, address),
        )
    return order_id


def foreign_rows(conn: Any) -> int:
    """How many rows are not demo data (see the module docstring); 0 means demo only."""
    params = {
        "tenant": DEMO_TENANT,
        "orders": list(DEMO_ORDER_IDS),
        "run_orders": _RUN_ORDER_LIKE,
        "users": list(DEMO_USERS),
    }
    row = _tuples(conn).execute(FOREIGN_ROWS_SQL, params).fetchone()
    return int(row[0]) if row else 0


def has_demo_data(conn: Any) -> bool:
    """True once any seeded demo order exists."""
    row = _tuples(conn).execute(DEMO_ROWS_SQL, (DEMO_TENANT, list(DEMO_ORDER_IDS))).fetchone()
    return bool(row and row[0])
