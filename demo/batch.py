"""`close_tickets`: one confirmation for a fixed set of tickets, never a wider one.

Declared with the public `write_tool`: `normalize=` spells the request out as a filter,
`freeze=` resolves it into the exact set at proposal time, and the function is a local
write that closes each ticket of that set.

The model names tickets (or asks for all of the user's resolved ones); the proposal
freezes the exact, sorted id list, its count, the filter that produced it, each
ticket's version and a digest of the set, all inside the canonical arguments, so the
confirmed args digest covers the set. At execution the filter is evaluated again: if
it now yields a different set (grown or shrunk), the whole batch is refused with
`scope_changed` and nothing changes. Each ticket is then closed in its own SAVEPOINT
under its own derived request key (`<request_key>#<ticket_id>`) and gets its own
receipt; a ticket that fails (it changed since the preview) neither stops nor repeats
the others.
"""

from __future__ import annotations

from typing import Annotated, Any

import psycopg
from psycopg.types.json import Jsonb
from pydantic import Field

from writegate import (
    Checked,
    ExecutionFailed,
    Identity,
    NotFound,
    PreviewField,
    ScopeChanged,
    StateChanged,
    ToolPreview,
    ValidationFailed,
    WritegateError,
    write_tool,
)
from writegate.demo.formats import digest
from writegate.demo.tickets import TicketId, check_transition, own_ticket, ticket_view

MAX_BATCH = 200
FROM_STATUS, TO_STATUS = "resolved", "closed"

# The filter, evaluated the same way at proposal and at execution (then with a lock).
SCOPE_SQL = """
SELECT ticket_id, title, description, status, version, created_at, updated_at
FROM tickets
WHERE tenant_id = %(tenant)s AND user_id = %(user)s AND status = %(status)s
  AND (%(ids)s::text[] IS NULL OR ticket_id = ANY(%(ids)s::text[]))
ORDER BY ticket_id
LIMIT %(limit)s
"""
CLOSE_ITEM_SQL = """
UPDATE tickets SET status = 'closed', version = version + 1, updated_at = now()
WHERE ticket_id = %s AND tenant_id = %s AND user_id = %s AND version = %s
  AND status = 'resolved'
RETURNING ticket_id, title, description, status, version, created_at, updated_at
"""
INSERT_ITEM_SQL = """
INSERT INTO batch_items (request_key, batch_request_key, tenant_id, item, status, result)
VALUES (%s, %s, %s, %s, %s, %s)
"""
SELECT_ITEM_SQL = "SELECT result FROM batch_items WHERE request_key = %s"


TicketIds = Annotated[
    list[TicketId] | None,
    Field(
        max_length=MAX_BATCH,
        description="The tickets to close (each must be resolved), or null for all of "
        f"the user's resolved tickets (at most {MAX_BATCH}).",
    ),
]


def item_key(request_key: str, ticket_id: str) -> str:
    return f"{request_key}#{ticket_id}"


def _scope(
    conn: Any, identity: Identity, ids: list[str] | None, *, lock: bool
) -> list[dict[str, Any]]:
    params = {"tenant": identity.tenant_id, "user": identity.user_id,
              "status": FROM_STATUS, "ids": ids, "limit": MAX_BATCH + 1}  # fmt: skip
    return list(conn.execute(SCOPE_SQL + (" FOR UPDATE" if lock else ""), params))


def _as_filter(args: dict[str, Any]) -> dict[str, Any]:
    """The request as a filter: the named ids sorted and once each, or None for all."""
    ids = args["ticket_ids"]
    if ids is not None and not ids:
        raise ValidationFailed("name at least one ticket, or null for all resolved ones")
    chosen = sorted(set(ids)) if ids is not None else None
    return {"filter": {"status": FROM_STATUS, "ticket_ids": chosen}}


def _freeze(args: dict[str, Any], *, conn: Any, identity: Identity) -> dict[str, Any]:
    """The request's filter, resolved now into the exact set the person will confirm."""
    wanted = args["filter"]["ticket_ids"]
    rows = _scope(conn, identity, wanted, lock=False)
    if len(rows) > MAX_BATCH:
        raise ValidationFailed(f"more than {MAX_BATCH} tickets match; name them instead")
    found = [row["ticket_id"] for row in rows]
    for missing in sorted(set(wanted or ()) - set(found)):
        ticket = own_ticket(conn, identity, missing)  # NotFound if it is not the user's
        check_transition(missing, ticket["status"], TO_STATUS)
    if not found:
        raise NotFound("no resolved tickets to close", filter=args["filter"])
    return {
        "filter": args["filter"],
        "ticket_ids": found,
        "count": len(found),
        "set_digest": digest(found),
        "versions": {row["ticket_id"]: row["version"] for row in rows},
    }


def _check(
    args: dict[str, Any], identity: Identity, *, conn: Any, expected_version: int | None
) -> Checked:
    state = digest({"ids": args["ticket_ids"], "versions": args["versions"]})
    version = int(state[7:22], 16)  # any change of set or version changes it
    frozen = args["ticket_ids"]
    if expected_version is not None:
        # Executing: the filter again, under lock; a grown or shrunk set is covered by
        # no confirmation. A ticket that merely changed fails on its own, as an item.
        locked = _scope(conn, identity, args["filter"]["ticket_ids"], lock=True)
        now = [row["ticket_id"] for row in locked]
        if now != frozen:
            raise ScopeChanged(
                count=len(frozen),
                now=len(now),
                added=sorted(set(now) - set(frozen)),
                removed=sorted(set(frozen) - set(now)),
                set_digest=args["set_digest"],
            )
        return Checked(version)
    rows = _scope(conn, identity, frozen, lock=False)
    if [r["ticket_id"] for r in rows] != frozen:
        raise ScopeChanged(count=args["count"], now=len(rows))
    return Checked(version, {"tickets": [ticket_view(row) for row in rows]})


def _preview(args: dict[str, Any], *, facts: dict[str, Any]) -> ToolPreview:
    tickets, count = facts["tickets"], args["count"]
    listed = "; ".join(f"{t['ticket_id']} “{t['title']}”" for t in tickets)
    chosen = args["filter"]["ticket_ids"]
    how = "all your Resolved tickets" if chosen is None else "the tickets you named"
    versions = ", ".join(f"{k} v{v}" for k, v in args["versions"].items())
    return ToolPreview(
        title=f"Close {count} ticket{'s' if count != 1 else ''}",
        target=listed,
        fields=[
            PreviewField("ticket_ids", args["ticket_ids"], listed),
            PreviewField("count", count, f"{count} tickets"),
            PreviewField("filter", args["filter"], f"{how}, if Resolved"),
            PreviewField("versions", args["versions"], versions),
            PreviewField("set_digest", args["set_digest"], args["set_digest"]),
        ],
        impact=f"{count} tickets move from Resolved to Closed; closed is final. "
        "Only these tickets: if the set changes before execution, nothing is closed.",
    )


@write_tool(
    side_effect="irreversible",
    resource=lambda args: f"tickets:batch:{args['set_digest'][7:23]}",
    normalize=_as_filter,
    freeze=_freeze,
    validate=_check,
    preview=_preview,
)
def close_tickets(
    ticket_ids: TicketIds,
    *,
    request_key: str,
    identity: Identity,
    conn: Any,
    confirmed_args: dict[str, Any],
) -> dict[str, Any]:
    """Propose closing several of the user's resolved tickets at once: the ids given, or
    null for all resolved ones. The preview lists the exact tickets; only that set is
    ever closed, and nothing happens until the user confirms. Closed is final."""
    versions = confirmed_args["versions"]
    items = [_close_one(conn, identity, versions, request_key, tid) for tid in ticket_ids or ()]
    closed = sum(1 for item in items if item["status"] == "succeeded")
    if not closed:  # raising undoes the whole transaction: the token stays unused
        raise StateChanged("no ticket of the batch could be closed", items=items)
    return {
        "status": "closed" if closed == len(items) else "partial",
        "count": len(items),
        "succeeded": closed,
        "failed": len(items) - closed,
        "set_digest": confirmed_args["set_digest"],
        "items": items,
    }


def _close_one(
    conn: Any, identity: Identity, versions: dict[str, int], request_key: str, ticket_id: str
) -> dict[str, Any]:
    key = item_key(request_key, ticket_id)
    previous = conn.execute(SELECT_ITEM_SQL, (key,)).fetchone()
    if previous is not None:  # this item already ran under its key: report, never repeat
        return {**previous["result"], "replayed": True}
    receipt: dict[str, Any] = {"ticket_id": ticket_id, "request_key": key}
    try:
        with conn.transaction():  # a SAVEPOINT: a failure undoes this item only
            params = (ticket_id, identity.tenant_id, identity.user_id, versions[ticket_id])
            row = conn.execute(CLOSE_ITEM_SQL, params).fetchone()
            if row is None:
                raise StateChanged(ticket_id=ticket_id, expected_version=versions[ticket_id])
            receipt |= {"status": "succeeded", "ticket": ticket_view(row)}
    except WritegateError as exc:
        receipt |= {"status": "failed", "error": _error(exc)}
    except psycopg.Error as exc:  # the database refused this one item
        receipt |= {"status": "failed", "error": _error(ExecutionFailed(type(exc).__name__))}
    # No ON CONFLICT: the key is this execution's own, so a duplicate must fail loudly.
    conn.execute(
        INSERT_ITEM_SQL,
        (key, request_key, identity.tenant_id, ticket_id, receipt["status"], Jsonb(receipt)),
    )
    return receipt


def _error(exc: WritegateError) -> dict[str, Any]:
    body = exc.to_dict()
    body.pop("request_id", None)  # the item's own request key identifies it
    return body
