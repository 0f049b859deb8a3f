"""The ticket writes, declared through the public `write_tool` API like anyone's tools.

Both are local writes: each function takes `conn`, so it runs inside writegate's own
transaction, after `validate` saw the version the person confirmed once more, and its
row commits together with the ledger's or not at all.
"""

from __future__ import annotations

from typing import Any

from writegate import (
    Checked,
    IdempotencyConflict,
    Identity,
    PreviewField,
    StateChanged,
    ToolPreview,
    write_tool,
)
from writegate.demo.tickets import (
    INSERT_TICKET_SQL,
    NEW_TICKET_RESOURCE,
    NEXT_TICKET_NUMBER_SQL,
    SELECT_TICKET_BY_REQUEST_SQL,
    TICKET_STATUSES,
    TRANSITIONS,
    UPDATE_TICKET_STATUS_SQL,
    Description,
    NewStatus,
    TicketId,
    Title,
    check_transition,
    label,
    own_ticket,
    ticket_view,
)


def _check_update(
    args: dict[str, Any], identity: Identity, *, conn: Any, expected_version: int | None
) -> Checked:
    ticket = own_ticket(conn, identity, args["ticket_id"])
    if expected_version is not None and ticket["version"] != expected_version:
        return Checked(ticket["version"])  # changed since confirmed: state_changed comes first
    check_transition(ticket["ticket_id"], ticket["status"], args["status"])
    return Checked(ticket["version"], {"ticket": ticket})


def _preview_update(args: dict[str, Any], *, facts: dict[str, Any]) -> ToolPreview:
    ticket = facts["ticket"]
    old, new = ticket["status"], args["status"]
    return ToolPreview(
        title=f"Update ticket {ticket['ticket_id']}",
        target=f"Ticket {ticket['ticket_id']} “{ticket['title']}”",
        fields=[
            PreviewField("ticket_id", args["ticket_id"], label="Ticket", identifies=True),
            PreviewField(
                "status",
                new,
                f"{label(new)} (now {label(old)})",
                label="New status",
                options=TICKET_STATUSES,
            ),
        ],
        impact=f"Status changes from {label(old)} to {label(new)}.",
    )


@write_tool(
    side_effect="reversible",
    resource=lambda args: f"ticket:{args['ticket_id']}",
    validate=_check_update,
    preview=_preview_update,
)
def update_ticket(
    ticket_id: TicketId,
    status: NewStatus,
    *,
    request_key: str,
    identity: Identity,
    conn: Any,
    expected_version: int,
) -> dict[str, Any]:
    """Propose changing the status of one of the user's tickets. Allowed: open ->
    in_progress or resolved; in_progress -> resolved or open; resolved -> closed, open
    or in_progress; closed is final. Nothing happens until the user confirms.
    """
    # One guarded statement: the confirmed version, and a status it may move from.
    may_come_from = [old for old, nexts in TRANSITIONS.items() if status in nexts]
    params = (
        status,
        ticket_id,
        identity.tenant_id,
        identity.user_id,
        expected_version,
        may_come_from,
    )
    row = conn.execute(UPDATE_TICKET_STATUS_SQL, params).fetchone()
    if row is None:
        raise StateChanged(ticket_id=ticket_id)
    return {"ticket": ticket_view(row)}


def _preview_create(args: dict[str, Any]) -> ToolPreview:
    return ToolPreview(
        title="Create a support ticket",
        target="A new ticket in your queue",
        fields=[
            PreviewField("title", args["title"], label="Title"),
            PreviewField("description", args["description"], label="Description"),
        ],
        impact="A new ticket is opened with status Open.",
    )


@write_tool(
    side_effect="reversible",
    # Nothing exists yet to own or to change: no validate, so version 0, "not created".
    resource=lambda args: NEW_TICKET_RESOURCE,
    preview=_preview_create,
)
def create_ticket(
    title: Title, description: Description, *, request_key: str, identity: Identity, conn: Any
) -> dict[str, Any]:
    """Propose opening a new support ticket for the user. Nothing happens until the user
    confirms the preview.
    """
    number = conn.execute(NEXT_TICKET_NUMBER_SQL).fetchone()["n"]
    ticket_id = f"tkt_{number:06d}"
    params = (ticket_id, identity.tenant_id, identity.user_id, title, description, request_key)
    row = conn.execute(INSERT_TICKET_SQL, params).fetchone()
    if row is None:
        # The request key is UNIQUE: this confirmation already created its ticket.
        existing = conn.execute(SELECT_TICKET_BY_REQUEST_SQL, (request_key,)).fetchone()
        raise IdempotencyConflict(
            "this ticket request was already applied",
            request_key=request_key,
            ticket_id=existing["ticket_id"] if existing else None,
        )
    return {"ticket": ticket_view(row)}
