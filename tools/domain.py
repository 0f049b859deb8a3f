"""The demo domain's tools, registered together: orders and refunds, tickets, the batch close."""

from __future__ import annotations

from writegate.tools.batch import CloseTickets
from writegate.tools.orders import get_order, list_orders
from writegate.tools.provider import ProviderClient
from writegate.tools.refunds import refund_order_tool
from writegate.tools.registry import Registry
from writegate.tools.ticket_writes import create_ticket, update_ticket
from writegate.tools.tickets import get_ticket, list_tickets


def default_registry(provider: ProviderClient) -> Registry:
    """All eight tools (seven single writes and reads, one batch); refunds go to `provider`."""
    return Registry(
        [
            get_order.spec,
            list_orders.spec,
            refund_order_tool(provider).spec,
            get_ticket.spec,
            list_tickets.spec,
            create_ticket.spec,
            update_ticket.spec,
            CloseTickets(),
        ]
    )
