"""Demo data: one tenant, two users, a few orders and tickets.

`seed_demo` only inserts what is missing, so it can run on every start; `reset_demo`
removes the demo rows (and what the demo created for the demo users) so a rerun of the
demo starts from the seeded state. Neither touches any other tenant's rows.
"""

from __future__ import annotations

from typing import Any

DEMO_TENANT = "tenant_hz"
DEMO_USERS = ("user_42", "user_7")
DEMO_ORDER_IDS = ("ord_1001", "ord_1002", "ord_2002")
DEMO_TICKET_IDS = ("tkt_000001", "tkt_000002")

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
DELETE_DEMO_PROVIDER_REFUNDS_SQL = "DELETE FROM provider.refunds WHERE order_id = ANY(%s)"
DELETE_DEMO_REFUNDS_SQL = "DELETE FROM refunds WHERE tenant_id = %s AND order_id = ANY(%s)"
DELETE_DEMO_ORDERS_SQL = "DELETE FROM orders WHERE tenant_id = %s AND order_id = ANY(%s)"
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
    orders, tickets, users = list(DEMO_ORDER_IDS), list(DEMO_TICKET_IDS), list(DEMO_USERS)
    with conn.transaction():
        conn.execute(DELETE_DEMO_PROVIDER_REFUNDS_SQL, (orders,))
        conn.execute(DELETE_DEMO_REFUNDS_SQL, (DEMO_TENANT, orders))
        conn.execute(DELETE_DEMO_ORDERS_SQL, (DEMO_TENANT, orders))
        conn.execute(DELETE_DEMO_TICKETS_SQL, (DEMO_TENANT, tickets, users))
