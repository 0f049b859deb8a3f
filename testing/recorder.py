"""The tool under test, seen from writegate's side: every call it gets, and its faults.

`Recorder` stands in front of the tool's protocol view (`ToolSpec`) and passes every
call through unchanged, noting what writegate handed it: the local write (`apply`),
the downstream call and the lookup, each with its request key and arguments, and a
read with the identity it runs for. That is how the kit knows which request keys and
which identities the tool saw.

It is also the kit's own fault injector, used when the caller brings none: while
`inject(fault)` is open, every downstream call times out, before it reaches the tool
(`TIMEOUT_BEFORE`: nothing applied) or after the tool answered (`LOSE_ANSWER`: applied,
answer lost). The timeout is `UpstreamTimeout`, what a downstream client reports, so
the executor's retries (same request key) run as they would in production.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from writegate.approval.errors import UpstreamTimeout
from writegate.approval.models import Identity
from writegate.approval.spec import DownstreamResult, ToolContext, ToolSpec


class Fault(StrEnum):
    """What a fault hook makes every downstream call do while it is open."""

    TIMEOUT_BEFORE = "timeout_before"  # no answer, and nothing applied
    LOSE_ANSWER = "lose_answer"  # applied, then the answer is lost (a timeout)


# The caller's own fault hook: `faults(Fault.LOSE_ANSWER)` is a context manager.
FaultHook = Callable[[Fault], AbstractContextManager[None]]
"""`check_write_tool(faults=...)`: a context manager under which every downstream call
meets the fault (its answer lost, or a timeout before it applied)."""


@dataclass(frozen=True)
class Call:
    kind: str  # "apply" | "downstream" | "lookup" | "read"
    request_key: str  # "" for a read
    args: dict[str, Any]
    identity: Identity | None = None  # who a read runs for


class Recorder:
    """A transparent `ToolSpec` proxy that records calls and can inject faults."""

    def __init__(self, spec: ToolSpec) -> None:
        self._spec = spec
        self._lock = threading.Lock()
        self._calls: list[Call] = []
        self._fault: Fault | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._spec, name)

    # -- what the kit reads -------------------------------------------------------------

    def mark(self) -> int:
        with self._lock:
            return len(self._calls)

    def since(self, mark: int, kind: str | None = None) -> list[Call]:
        with self._lock:
            calls = self._calls[mark:]
        return [call for call in calls if kind is None or call.kind == kind]

    @contextmanager
    def inject(self, fault: Fault) -> Iterator[None]:
        self._fault = fault
        try:
            yield
        finally:
            self._fault = None

    # -- what writegate calls -----------------------------------------------------------

    def _note(
        self, kind: str, request_key: str, args: dict[str, Any], identity: Identity | None = None
    ) -> None:
        with self._lock:
            self._calls.append(Call(kind, request_key, dict(args), identity))

    def read(self, ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        self._note("read", "", args, ctx.identity)
        return self._spec.read(ctx, args)

    def apply(
        self, ctx: ToolContext, args: dict[str, Any], *, expected_version: int, request_key: str
    ) -> dict[str, Any]:
        self._note("apply", request_key, args)
        return self._spec.apply(
            ctx, args, expected_version=expected_version, request_key=request_key
        )

    def call_downstream(self, args: dict[str, Any], request_key: str) -> DownstreamResult:
        self._note("downstream", request_key, args)
        fault = self._fault
        if fault is Fault.TIMEOUT_BEFORE:
            raise UpstreamTimeout("injected by the conformance kit: no answer, nothing sent")
        result = self._spec.call_downstream(args, request_key)
        if fault is Fault.LOSE_ANSWER:
            raise UpstreamTimeout("injected by the conformance kit: applied, answer lost")
        return result

    def lookup_downstream(self, args: dict[str, Any], request_key: str) -> DownstreamResult | None:
        self._note("lookup", request_key, args)
        return self._spec.lookup_downstream(args, request_key)
