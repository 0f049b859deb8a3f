"""One OpenTelemetry trace per proposal's life: propose, decide, execute (downstream,
record), reconcile, across every process that touches it.

The life of a proposal spans processes and days, so the trace context travels in the
ledger: `propose` starts a new trace and stores its `traceparent` on the proposal row;
every later step, in whichever replica or reconciler runs it, reads it back and opens
its span as a child of it. Spans carry ids only: proposal, execution, request key,
tenant and the argument digest, never a token or the arguments themselves.

Only the OpenTelemetry API is needed. With no tracer provider installed (no
`writegate[otel]` or no exporter configured) every helper returns at once after one
check, and nothing extra is read or written in the database.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Protocol

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACER_NAME = "writegate"
ATTRIBUTES = ("proposal_id", "execution_id", "request_key", "tenant_id", "args_digest", "action")
_PROPAGATOR = TraceContextTextMapPropagator()
_provider: trace.TracerProvider | None = None  # set_provider's; else the global one
_UNKNOWN = object()
_NO_OP = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
_OFF: AbstractContextManager[None] = nullcontext()


class TraceRows(Protocol):
    """The ledger's side: where a proposal's trace context is kept."""

    def get_traceparent(self, *, proposal_id: str | None, token_hash: str | None) -> str | None: ...
    def set_traceparent(self, proposal_id: str, traceparent: str) -> None: ...


def set_provider(provider: trace.TracerProvider | None) -> None:
    """Trace writegate's steps with `provider` instead of the global one (None: undo);
    for a host that keeps its own provider, and for tests."""
    global _provider
    _provider = provider


def _current_provider() -> trace.TracerProvider:
    return _provider if _provider is not None else trace.get_tracer_provider()


def enabled() -> bool:
    """Whether a tracer provider is installed (an SDK was configured).

    Called at every step, so it avoids `trace.get_tracer_provider()` while no global
    provider is set (that call reads the environment each time): the API keeps the
    global one in `_TRACER_PROVIDER`, None until set."""
    if _provider is None and getattr(trace, "_TRACER_PROVIDER", _UNKNOWN) is None:
        return False
    return not isinstance(_current_provider(), _NO_OP)


def _attributes(ids: dict[str, Any]) -> dict[str, str]:
    unknown = set(ids) - set(ATTRIBUTES)
    if unknown:  # a new attribute must be added to the list on purpose: never a secret
        raise ValueError(f"not a trace attribute: {sorted(unknown)}")
    return {f"writegate.{k}": str(v) for k, v in ids.items() if v is not None}


def span(
    name: str, traceparent: str | None = None, *, root: bool = False, **ids: Any
) -> AbstractContextManager[Span | None]:
    """A span named `name`, child of `traceparent` if given (else of the current span,
    or of nothing when `root`); None and no cost when tracing is off."""
    if not enabled():
        return _OFF
    return _span(name, traceparent, root, ids)


@contextmanager
def _span(
    name: str, traceparent: str | None, root: bool, ids: dict[str, Any]
) -> Iterator[Span | None]:
    parent: otel_context.Context | None
    if traceparent:
        parent = _PROPAGATOR.extract({"traceparent": traceparent})
    else:
        parent = otel_context.Context() if root else None
    tracer = _current_provider().get_tracer(TRACER_NAME)
    with tracer.start_as_current_span(name, context=parent, attributes=_attributes(ids)) as s:
        yield s


def annotate(**ids: Any) -> None:
    """Add ids to the current span (learned after it started)."""
    if enabled():
        trace.get_current_span().set_attributes(_attributes(ids))


def current_traceparent() -> str | None:
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get("traceparent")


def remember(tx: object, proposal_id: str) -> None:
    """Store the current trace context on a new proposal's row."""
    if not enabled() or not hasattr(tx, "set_traceparent"):
        return
    traceparent = current_traceparent()
    if traceparent:
        tx.set_traceparent(proposal_id, traceparent)


def recall(
    store: Any, *, proposal_id: str | None = None, token_hash: str | None = None
) -> str | None:
    """A proposal's stored trace context (by its id, or its token's hash), if any."""
    if not enabled() or (proposal_id is None and token_hash is None):
        return None
    with store.transaction() as tx:
        if not hasattr(tx, "get_traceparent"):
            return None
        found: str | None = tx.get_traceparent(proposal_id=proposal_id, token_hash=token_hash)
        return found
