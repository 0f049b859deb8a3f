"""Support tickets: two reads (here) and the two writes (demo/ticket_writes.py).

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

from writegate import Identity, InvalidTransition, NotFound, read_tool
from writegate.demo.formats import rfc3339

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
SELECT_TICKET_BY_REQUEST_SQL = "SELECT ticket_id FROM tickets WHERE request_key = %s"

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
        "created_at": rfc3339(row["created_at"]),
        "updated_at": rfc3339(row["updated_at"]),
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


def own_ticket(conn: Any, identity: Identity, ticket_id: str) -> dict[str, Any]:
    """The caller's own ticket; anyone else's is reported missing."""
    params = (ticket_id, identity.tenant_id, identity.user_id)
    row = conn.execute(SELECT_TICKET_SQL, params).fetchone()
    if row is None:
        raise NotFound("no such ticket for this user", ticket_id=ticket_id)
    return ticket_view(row)


TicketId = Annotated[
    str, Field(min_length=1, max_length=64, description="The ticket id, e.g. tkt_000001.")
]


NewStatus = Annotated[TicketStatus, Field(description="The new status.")]
Title = Annotated[str, Field(min_length=1, max_length=200, description="1 to 200 characters.")]
Description = Annotated[
    str, Field(min_length=1, max_length=4000, description="1 to 4000 characters.")
]


@read_tool
def get_ticket(ticket_id: TicketId, *, identity: Identity, conn: Any) -> dict[str, Any]:
    """Look up one of the user's support tickets, with the statuses it may move to."""
    return own_ticket(conn, identity, ticket_id)


@read_tool
def list_tickets(*, identity: Identity, conn: Any) -> dict[str, Any]:
    """List the user's support tickets (at most 100)."""
    rows = conn.execute(LIST_TICKETS_SQL, (identity.tenant_id, identity.user_id)).fetchall()
    return {"tickets": [ticket_view(row) for row in rows]}
