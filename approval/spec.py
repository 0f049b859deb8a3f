"""What the protocol needs to know about a tool.

`tools/` implements this for each domain tool; `approval/` only talks to the
interface, so the protocol never imports a domain. Approval wraps tools: a tool never
checks approval itself, it only declares its side effect and how to validate, preview
and apply one operation.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from writegate.approval.models import Identity, Preview, SideEffect
from writegate.approval.retry import RetryPolicy


@dataclass(frozen=True)
class ToolContext:
    """Who is calling, inside which transaction.

    `conn` is the store's transactional handle (a psycopg connection for PostgreSQL);
    domain code runs its SQL on it so that the business write commits or rolls back
    together with the ledger rows.
    """

    identity: Identity
    conn: Any
    thread_id: str | None = None


@dataclass(frozen=True)
class Validated:
    """What the business validator saw: the target and the version to guard the write."""

    resource: str
    state_version: int
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DownstreamResult:
    provider_ref: str | None
    result: dict[str, Any] = field(default_factory=dict)

    def agrees_with(self, args: dict[str, Any]) -> bool:
        """The downstream's record is for this request: every argument it echoes matches."""
        return all(self.result[k] == v for k, v in args.items() if k in self.result)


class ToolSpec(Protocol):
    """Every member the protocol reads of a tool. The first part each tool defines; the
    optional hooks after it have defaults here, which a class that subclasses
    `ToolSpec` (the kit's tools do, through `tools/registry.py`'s `Tool`) inherits, so
    a call site reads a hook as a member, never probing whether it is there."""

    name: str
    description: str
    side_effect: SideEffect
    requires_approval: bool

    def json_schema(self) -> dict[str, Any]: ...

    def normalize(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Raw model arguments -> canonical arguments, or ValidationFailed/Clarification."""
        ...

    def validate(self, ctx: ToolContext, args: dict[str, Any]) -> Validated:
        """Ownership, permission and current state; NotFound for other people's things."""
        ...

    def preview(self, args: dict[str, Any], seen: Validated) -> Preview: ...

    def read(self, ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        """Run a read tool (side effect `none`)."""
        ...

    def apply(
        self, ctx: ToolContext, args: dict[str, Any], *, expected_version: int, request_key: str
    ) -> dict[str, Any]:
        """The local business write, guarded by `expected_version` (StateChanged if not)."""
        ...

    @property
    def has_downstream(self) -> bool: ...

    def call_downstream(self, args: dict[str, Any], request_key: str) -> DownstreamResult:
        """Call the external system with `request_key` as its idempotency key."""
        ...

    def lookup_downstream(self, args: dict[str, Any], request_key: str) -> DownstreamResult | None:
        """Ask the external system whether `request_key` was applied (None: never seen)."""
        ...

    def on_downstream_success(
        self, ctx: ToolContext, args: dict[str, Any], request_key: str, result: DownstreamResult
    ) -> None:
        """Record the downstream's success locally, in the transaction that records it
        in the ledger (e.g. the refund row gets the provider's reference)."""
        ...

    def compensate(self, ctx: ToolContext, args: dict[str, Any], request_key: str) -> None:
        """Undo the local write after the downstream refused for good."""
        ...

    # -- optional hooks, with their defaults --------------------------------------------

    #: How long its proposals wait: over its tier's and the policy's default, under the
    #: policy's own setting for the operation. None: the tier's or the policy's.
    expires_in: timedelta | None = None
    #: Its own deadline and retries for the downstream call (approval/downstream.py).
    #: None: the executor's (`Writegate.open(retry=...)`).
    retry: RetryPolicy | None = None
    #: True: the downstream drops a repeated request key, so a call that may have
    #: applied may be sent again with it (never while it may still be running).
    dedupes_by_key: bool = False

    @property
    def has_lookup(self) -> bool:
        """False: `lookup_downstream` cannot answer, so an unknown outcome goes to a
        person (or a re-send, with `dedupes_by_key`), never sent again blindly."""
        return True

    @property
    def has_applied_since(self) -> bool:
        """True: `applied_downstream_since` lists what the downstream applied
        (approval/failover.py reads it after a promotion)."""
        return False

    def applied_downstream_since(self, since: datetime) -> dict[str, dict[str, Any]]:
        """What the downstream applied since `since`, as {request_key: record}; asked
        only when `has_applied_since`."""
        return {}

    @property
    def declared_stakes(self) -> frozenset[str]:
        """Which risk inputs `risk_inputs` declares for every call (`amount_minor`,
        `count`): a tier's re-typed field falls back on them (approval/retype.py)."""
        return frozenset()

    def risk_inputs(self, args: dict[str, Any]) -> dict[str, Any]:
        """Inputs the tool adds to (or corrects in) what the risk tier is judged on: a
        declared `amount_minor` + `currency`, or a `count` (approval/risk.py)."""
        return {}

    def freeze_scope(self, ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        """At proposal time, the arguments with what must be fixed now joined to them (a
        batch's exact resource set), so the person confirms exactly that."""
        return args


class ToolLookup(Protocol):
    def get(self, name: str) -> ToolSpec: ...

    def names(self) -> list[str]:
        """Every registered tool's name."""
        ...


# Who a downstream call acts for. Set by the executor and the reconciler around the
# downstream call only, so a tool that needs the user (to call an API on their behalf)
# reads it there; outside that call it is None.
_ACTING_FOR: ContextVar[Identity | None] = ContextVar("writegate_acting_for", default=None)


@contextmanager
def acting_for(identity: Identity) -> Iterator[None]:
    token = _ACTING_FOR.set(identity)
    try:
        yield
    finally:
        _ACTING_FOR.reset(token)


def acting_identity() -> Identity | None:
    """The identity a downstream call runs for, or None outside one."""
    return _ACTING_FOR.get()
