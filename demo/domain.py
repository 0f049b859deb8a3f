"""The demo domain's tools, registered together: orders and refunds, tickets, the batch close.

Each one is declared with the public `write_tool` / `read_tool`, as anyone's tool is:
there is no private path for the demo.
"""

from __future__ import annotations

from writegate import GuardedTool
from writegate.demo.batch import close_tickets
from writegate.demo.orders import get_order, list_orders
from writegate.demo.provider import ProviderClient
from writegate.demo.refunds import refund_order_tool
from writegate.demo.ticket_writes import create_ticket, update_ticket
from writegate.demo.tickets import get_ticket, list_tickets


def domain_tools(provider: ProviderClient) -> list[GuardedTool]:
    """All eight tools (seven single writes and reads, one batch); refunds go to `provider`."""
    return [
        get_order,
        list_orders,
        refund_order_tool(provider),
        get_ticket,
        list_tickets,
        create_ticket,
        update_ticket,
        close_tickets,
    ]
