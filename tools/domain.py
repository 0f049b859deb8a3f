"""The demo domain's tools, registered together: orders and refunds, tickets, the batch close."""

from __future__ import annotations

from writegate.tools.batch import CloseTickets
from writegate.tools.orders import GetOrder, ListOrders, RefundOrder
from writegate.tools.provider import ProviderClient
from writegate.tools.registry import Registry
from writegate.tools.ticket_writes import create_ticket, update_ticket
from writegate.tools.tickets import GetTicket, ListTickets


def default_registry(provider: ProviderClient) -> Registry:
    """All eight tools (seven single writes and reads, one batch); refunds go to `provider`."""
    return Registry(
        [
            GetOrder(),
            ListOrders(),
            RefundOrder(provider),
            GetTicket(),
            ListTickets(),
            create_ticket.spec,
            update_ticket.spec,
            CloseTickets(),
        ]
    )
