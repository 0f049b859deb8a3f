"""What a library user reads back from the ledger: typed, frozen snapshots.

`AuditRow` is one row of the audit trail (`Writegate.audit`); `ProposalView` is one
proposal as its requester or an approver sees it (`Writegate.awaiting_second_approval`,
`approve_as_second`, `decline_as_second`, `revoke`). Both are copies: changing one
changes nothing in the ledger. The ledger's own records (`approval/models.py`) stay
internal, so their shape may change without breaking a user.

A list comes a `Page` at a time: a list (as before) with the `next_cursor` to pass back
for the next page, None on the last. A cursor is opaque (base64 of the last row's key:
the audit row's `audit_id`, a proposal's `(created_at, proposal_id)`, keys that never
change), so a page never repeats a row nor skips one that was there when the walk
began, whatever is written meanwhile (docs/paging.md).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Self, TypeVar

from writegate.approval.contract import PreviewView
from writegate.approval.errors import ValidationFailed
from writegate.approval.models import Proposal

MAX_AUDIT_ROWS = 10_000
Order = Literal["oldest", "newest"]
ORDERS: tuple[Order, ...] = ("oldest", "newest")
T = TypeVar("T")


class Page(list[T]):
    """One page of a list, oldest or newest first: its rows, and `next_cursor`, the
    cursor of the page after it (None when this one is the last)."""

    def __init__(self, items: Iterable[T] = (), next_cursor: str | None = None) -> None:
        super().__init__(items)
        self.next_cursor = next_cursor

    @property
    def items(self) -> list[T]:
        return list(self)


def encode_cursor(kind: str, order: Order, key: list[Any]) -> str:
    """An opaque cursor after the row whose key is `key`, for a list of `kind`."""
    raw = json.dumps({"of": kind, "order": order, "after": key}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: Any, kind: str, order: Any) -> list[Any] | None:
    """The key a cursor of this list and order carries; None for no cursor (the first
    page). Anything else is `validation_failed`, and nothing is read."""
    if order not in ORDERS:
        raise ValidationFailed(f"order is one of {', '.join(ORDERS)}")
    if cursor is None:
        return None
    try:
        text = base64.urlsafe_b64decode(str(cursor) + "=" * (-len(str(cursor)) % 4))
        body = json.loads(text)
        key = body["after"]
        fits = body["of"] == kind and body["order"] == order and isinstance(key, list)
    except (binascii.Error, ValueError, TypeError, KeyError, UnicodeDecodeError):
        fits = False
    if not (isinstance(cursor, str) and fits):
        raise ValidationFailed(
            f"cursor is not one this list gave for order={order}: "
            "pass a next_cursor back unchanged, or none for the first page"
        )
    return list(key)


def page_of(rows: list[T], limit: int, kind: str, order: Order, key: Any) -> Page[T]:
    """`rows`, fetched as `limit` + 1 to know whether more follow, as a page."""
    more = len(rows) > limit
    rows = rows[:limit]
    cursor = encode_cursor(kind, order, key(rows[-1])) if more else None
    return Page(rows, cursor)


@dataclass(frozen=True)
class AuditRow:
    """One audit row: a tool call, a person's decision, an execution or a reconciler's
    step. Arguments and results are stored as they were, errors as codes."""

    audit_id: int
    """Ascending in the order rows were written."""
    created_at: datetime
    """When it was written, on the database's clock."""
    tenant_id: str
    user_id: str
    """Who acted: the requester, an approver, or a reconciler's name."""
    thread_id: str | None
    """The conversation it came from, when there was one."""
    tool_name: str
    """The tool (`approval` for a refused second approval or revocation)."""
    event: str
    """`read`, `propose`, `decide`, `execute`, `reconcile`, `second_approval`, ..."""
    status: str
    """What came of it: `succeeded`, `confirmed`, `rejected`, `duplicate`, ..."""
    error_code: str | None
    """The refusal's stable code, when it was refused."""
    request_key: str | None
    """The operation's idempotency key, passed downstream."""
    proposal_id: str | None
    approver: str | None
    """Who decided, for a decision or an execution."""
    arguments: dict[str, Any] | None
    arguments_hash: str | None
    requested_digest: str | None
    """The digest of the arguments the model asked for."""
    approved_digest: str | None
    """The digest of the arguments the person confirmed."""
    executed_digest: str | None
    """The digest of the arguments that ran; all three are equal, or nothing ran."""
    result: dict[str, Any] | None
    """The result, or the refusal's structured body."""
    duration_ms: int

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Self:
        return cls(**{name: row[name] for name in cls.__dataclass_fields__})


def page_filters(limit: Any, *ids: Any, most: int = MAX_AUDIT_ROWS) -> int:
    """The page size, checked; the filters (`ids`) are text or None for any."""
    if type(limit) is not int or not 1 <= limit <= most:
        raise ValidationFailed(f"limit must be a whole number from 1 to {most}")
    if any(given is not None and not isinstance(given, str) for given in ids):
        raise ValidationFailed("thread_id, proposal_id, tool_name and status are text, or None")
    return limit


def audit_key(row: Mapping[str, Any] | AuditRow) -> list[Any]:
    return [row["audit_id"] if isinstance(row, Mapping) else row.audit_id]


def serial_after(key: list[Any] | None) -> int | None:
    """The serial id (an `audit_id`, an `escalation_id`) a cursor's key carries (None
    for the first page), checked."""
    if key is None:
        return None
    if len(key) != 1 or type(key[0]) is not int:
        raise ValidationFailed("cursor is not one this list gave") from None
    return int(key[0])


def audit_page(
    read: Callable[..., Iterable[dict[str, Any]]],
    tenant_id: Any,
    args: PageArgs,
    *,
    user_id: str | None = None,
) -> Page[dict[str, Any]]:
    """A page of one tenant's audit (required: rows never cross tenants), read by
    `read` (the store's `audit_rows`), only `user_id`'s rows when given."""
    if not isinstance(tenant_id, str) or not tenant_id.strip():
        raise ValidationFailed("tenant_id is required: the audit is read one tenant at a time")
    limit, key = args.checked("audit", MAX_AUDIT_ROWS)
    rows = read(
        tenant_id, thread_id=args.thread_id, proposal_id=args.proposal_id,
        tool_name=args.tool_name, status=args.status, user_id=user_id, order=args.order,
        after=serial_after(key), limit=limit + 1,
    )  # fmt: skip
    return args.page(list(rows), "audit", audit_key)


def created_key(created_at: datetime, row_id: str) -> list[Any]:
    """The key of a row listed by when it was created: `(created_at, its id)`, neither
    ever updated (a proposal, an HTTP thread)."""
    return [created_at.isoformat(), row_id]


def created_after(key: list[Any] | None) -> tuple[datetime, str] | None:
    """A `created_key` cursor's key as (created_at, id), checked."""
    if key is None:
        return None
    try:
        created_at, row_id = key
        return datetime.fromisoformat(created_at), str(row_id)
    except (TypeError, ValueError):
        raise ValidationFailed("cursor is not one this list gave") from None


proposal_key, proposal_after = created_key, created_after


@dataclass(frozen=True)
class PageArgs:
    """What one page of a list is asked for: its size, where it starts (the previous
    page's `next_cursor`, None for the first), which end first, and the filters, each
    matched exactly (None: any). A list that has no such filter refuses it."""

    limit: int = 100
    cursor: str | None = None
    order: Order = "oldest"
    thread_id: str | None = None
    proposal_id: str | None = None
    tool_name: str | None = None
    status: str | None = None

    def checked(self, kind: str, most: int) -> tuple[int, list[Any] | None]:
        """The page size and the cursor's key (None on the first page), both checked:
        anything else is `validation_failed`, and nothing is read."""
        ids = (self.thread_id, self.proposal_id, self.tool_name, self.status)
        limit = page_filters(self.limit, *ids, most=most)
        return limit, decode_cursor(self.cursor, kind, self.order)

    def page(self, rows: list[T], kind: str, key: Any) -> Page[T]:
        """`rows`, read as `limit` + 1, as this list's page."""
        return page_of(rows, self.limit, kind, self.order, key)

    def refuse(self, *filters: str) -> None:
        """`validation_failed` if a filter this list does not have is given."""
        given = [name for name in filters if getattr(self, name) is not None]
        if given:
            raise ValidationFailed(f"this list is not filtered by {', '.join(given)}")


@dataclass(frozen=True)
class ProposalView:
    """One proposal: the exact preview a person decides on, and where it stands."""

    proposal_id: str
    status: str
    """`awaiting_confirmation`, `awaiting_second_approval`, `confirmed`, `executed`,
    `declined`, `cancelled`, `expired`, `superseded` or `revoked`."""
    tenant_id: str
    requested_by: str
    """The user who asked; the token, once issued, is theirs alone."""
    thread_id: str
    operation: str
    resource: str
    args: dict[str, Any]
    """The canonical arguments that run, exactly."""
    args_digest: str
    preview: PreviewView
    """What the requester saw, with its `confirmation` block (tier and reasons)."""
    tier: str
    policy_version: str
    created_at: datetime
    expires_at: datetime
    """When the question lapses (database clock; at this instant it has)."""
    decided_by: str | None
    """Who made the last decision (the requester's confirm, a decline)."""
    second_approver: str | None
    """The approver who approved it, once one has."""
    revoked_by: str | None
    outcome: dict[str, Any] | None = None
    """After a second approval, the write it ran: its receipt (`status` "succeeded"),
    or the error body saying why it did not run or is not settled yet
    (`state_changed`, `outcome_unknown`, ...). None everywhere else."""

    @classmethod
    def of(cls, proposal: Proposal, outcome: dict[str, Any] | None = None) -> Self:
        preview: PreviewView = proposal.preview  # type: ignore[assignment]  # stored as shown
        return cls(
            proposal_id=proposal.proposal_id,
            status=proposal.status.value,
            tenant_id=proposal.tenant_id,
            requested_by=proposal.subject,
            thread_id=proposal.thread_id,
            operation=proposal.operation,
            resource=proposal.resource,
            args=proposal.args,
            args_digest=proposal.args_digest,
            preview=preview,
            tier=proposal.tier,
            policy_version=proposal.policy_version,
            created_at=proposal.created_at,
            expires_at=proposal.expires_at,
            decided_by=proposal.decided_by,
            second_approver=proposal.second_approver,
            revoked_by=proposal.revoked_by,
            outcome=outcome,
        )
