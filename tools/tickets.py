"""Support tickets: two reads, create and status change.

Status moves along open -> in_progress -> resolved -> closed. Also allowed: open ->
resolved (fixed at once), in_progress -> open (back to the queue) and resolved -> open
or in_progress (the fix did not hold). `closed` is final: a closed ticket is the
confirmed end of a case, and a recurrence gets a new ticket so the history of the old
one stays what the user signed off on. The table is checked when the change is
proposed and again, guarded by the version, when it is applied.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import Field

from writegate.approval.canonical import to_rfc3339
from writegate.approval.errors import IdempotencyConflict, InvalidTransition, NotFound, StateChanged
from writegate.approval.models import Preview, SideEffect
from writegate.approval.spec import ToolContext, Validated
from writegate.tools.registry import StrictArgs, Tool

TicketStatus = Literal["open", "in_progress", "resolved", "closed"]
TICKET_STATUSES: tuple[str, ...] = get_args(TicketStatus)

TRANSITIONS: dict[str, tuple[str, ...]] = {
    "open": ("in_progress", "resolved"),
    "in_progress": ("resolved", "open"),
    "resolved": ("closed", "open", "in_progress"),
    "closed": (),
}

SELECT_TICKET_SQL = """
SELECT ticket_id, title, description, status, version, created_at, updated_at
FROM tickets WHERE ticket_id = %s AND tenant_id = %s AND user_id = %s
"""
LIST_TICKETS_SQL = """
SELECT ticket_id, title, description, status, version, created_at, updated_at
FROM tickets WHERE tenant_id = %s AND user_id = %s
ORDER BY created_at, ticket_id LIMIT 100
"""
UPDATE_TICKET_STATUS_SQL = """
UPDATE tickets SET status = %s, version = version + 1, updated_at = now()
WHERE ticket_id = %s AND tenant_id = %s AND user_id = %s AND version = %s
  AND status = ANY(%s)
RETURNING ticket_id, title, description, status, version, created_at, updated_at
"""
NEXT_TICKET_NUMBER_SQL = "SELECT nextval('ticket_number_seq') AS n"
INSERT_TICKET_SQL = """
INSERT INTO tickets (ticket_id, tenant_id, user_id, title, description, status, request_key)
VALUES (%s, %s, %s, %s, %s, 'open', %s)
ON CONFLICT (request_key) DO NOTHING
RETURNING ticket_id, title, description, status, version, created_at, updated_at
"""
SELECT_TICKET_BY_REQUEST_SQL = "SELECT ticket_id FROM tickets WHERE request_key = %s"

NEW_TICKET_RESOURCE = "tickets:new"


def label(status: str) -> str:
    """ "in_progress" -> "In progress"."""
    return status.replace("_", " ").capitalize()


def ticket_view(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "ticket_id": row["ticket_id"],
        "title": row["title"],
        "description": row["description"],
        "status": row["status"],
        "allowed_next": list(TRANSITIONS.get(row["status"], ())),
        "version": row["version"],
        "created_at": to_rfc3339(row["created_at"]),
        "updated_at": to_rfc3339(row["updated_at"]),
    }


def check_transition(ticket_id: str, current: str, new: str) -> None:
    allowed = TRANSITIONS.get(current, ())
    if new not in allowed:
        why = "it already has that status" if new == current else "that change is not allowed"
        raise InvalidTransition(
            f"ticket {ticket_id} is {current}; cannot set it to {new}: {why}",
            ticket_id=ticket_id,
            current=current,
            requested=new,
            allowed_next=list(allowed),
        )


def find_ticket(ctx: ToolContext, ticket_id: str) -> dict[str, Any]:
    """The caller's own ticket; anyone else's is reported missing."""
    ident = ctx.identity
    params = (ticket_id, ident.tenant_id, ident.user_id)
    row = ctx.conn.execute(SELECT_TICKET_SQL, params).fetchone()
    if row is None:
        raise NotFound("no such ticket for this user", ticket_id=ticket_id)
    return ticket_view(row)


TicketId = Annotated[
    str, Field(min_length=1, max_length=64, description="The ticket id, e.g. tkt_000001.")
]


class TicketIdArgs(StrictArgs):
    ticket_id: TicketId


class NoArgs(StrictArgs):
    pass


class UpdateArgs(StrictArgs):
    ticket_id: TicketId
    status: Annotated[TicketStatus, Field(description="The new status.")]


class CreateArgs(StrictArgs):
    title: Annotated[str, Field(min_length=1, max_length=200, description="1 to 200 characters.")]
    description: Annotated[
        str, Field(min_length=1, max_length=4000, description="1 to 4000 characters.")
    ]


class GetTicket(Tool):
    name = "get_ticket"
    description = "Look up one of the user's support tickets, with the statuses it may move to."
    args_model = TicketIdArgs
    side_effect = SideEffect.NONE
    requires_approval = False

    def read(self, ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        return find_ticket(ctx, args["ticket_id"])


class ListTickets(Tool):
    name = "list_tickets"
    description = "List the user's support tickets (at most 100)."
    args_model = NoArgs
    side_effect = SideEffect.NONE
    requires_approval = False

    def read(self, ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        ident = ctx.identity
        rows = ctx.conn.execute(LIST_TICKETS_SQL, (ident.tenant_id, ident.user_id)).fetchall()
        return {"tickets": [ticket_view(row) for row in rows]}


class UpdateTicket(Tool):
    name = "update_ticket"
    description = (
        "Propose changing the status of one of the user's tickets. Allowed: open -> "
        "in_progress or resolved; in_progress -> resolved or open; resolved -> closed, open "
        "or in_progress; closed is final. Nothing happens until the user confirms."
    )
    args_model = UpdateArgs
    side_effect = SideEffect.REVERSIBLE
    requires_approval = True

    def validate(self, ctx: ToolContext, args: dict[str, Any]) -> Validated:
        ticket = find_ticket(ctx, args["ticket_id"])
        check_transition(ticket["ticket_id"], ticket["status"], args["status"])
        return Validated(f"ticket:{ticket['ticket_id']}", ticket["version"], {"ticket": ticket})

    def preview(self, args: dict[str, Any], seen: Validated) -> Preview:
        ticket = seen.facts["ticket"]
        old, new = ticket["status"], args["status"]
        return Preview(
            title=f"Update ticket {ticket['ticket_id']}",
            operation=self.name,
            target=f"Ticket {ticket['ticket_id']} “{ticket['title']}”",
            fields=[
                {"name": "ticket_id", "value": args["ticket_id"], "display": args["ticket_id"]},
                {"name": "status", "value": new, "display": f"{label(new)} (now {label(old)})"},
            ],
            impact=f"Status changes from {label(old)} to {label(new)}.",
            side_effect=self.side_effect,
            irreversible=False,
            external=False,
        )

    def apply(
        self, ctx: ToolContext, args: dict[str, Any], *, expected_version: int, request_key: str
    ) -> dict[str, Any]:
        ident, ticket_id, new = ctx.identity, args["ticket_id"], args["status"]
        may_come_from = [old for old, nexts in TRANSITIONS.items() if new in nexts]
        params = (new, ticket_id, ident.tenant_id, ident.user_id, expected_version, may_come_from)
        row = ctx.conn.execute(UPDATE_TICKET_STATUS_SQL, params).fetchone()
        if row is not None:
            return {"ticket": ticket_view(row)}
        current = find_ticket(ctx, ticket_id)  # NotFound if it is gone
        if current["version"] != expected_version:
            raise StateChanged(
                ticket_id=ticket_id,
                expected_version=expected_version,
                current_version=current["version"],
            )
        check_transition(ticket_id, current["status"], new)
        raise StateChanged(ticket_id=ticket_id)  # unreachable: the guard above passed


class CreateTicket(Tool):
    name = "create_ticket"
    description = (
        "Propose opening a new support ticket for the user. Nothing happens until the "
        "user confirms the preview."
    )
    args_model = CreateArgs
    side_effect = SideEffect.REVERSIBLE
    requires_approval = True

    def validate(self, ctx: ToolContext, args: dict[str, Any]) -> Validated:
        # Nothing exists yet to own or to change; version 0 stands for "not created".
        return Validated(NEW_TICKET_RESOURCE, 0, {})

    def preview(self, args: dict[str, Any], seen: Validated) -> Preview:
        return Preview(
            title="Create a support ticket",
            operation=self.name,
            target="A new ticket in your queue",
            fields=[
                {"name": "title", "value": args["title"], "display": args["title"]},
                {
                    "name": "description",
                    "value": args["description"],
                    "display": args["description"],
                },
            ],
            impact="A new ticket is opened with status Open.",
            side_effect=self.side_effect,
            irreversible=False,
            external=False,
        )

    def apply(
        self, ctx: ToolContext, args: dict[str, Any], *, expected_version: int, request_key: str
    ) -> dict[str, Any]:
        if expected_version != 0:
            raise StateChanged(expected_version=expected_version, current_version=0)
        ident = ctx.identity
        number = ctx.conn.execute(NEXT_TICKET_NUMBER_SQL).fetchone()["n"]
        ticket_id = f"tkt_{number:06d}"
        params = (ticket_id, ident.tenant_id, ident.user_id, args["title"], args["description"],
                  request_key)  # fmt: skip
        row = ctx.conn.execute(INSERT_TICKET_SQL, params).fetchone()
        if row is None:
            # The request key is UNIQUE: this confirmation already created its ticket.
            existing = ctx.conn.execute(SELECT_TICKET_BY_REQUEST_SQL, (request_key,)).fetchone()
            raise IdempotencyConflict(
                "this ticket request was already applied",
                request_key=request_key,
                ticket_id=existing["ticket_id"] if existing else None,
            )
        return {"ticket": ticket_view(row)}
