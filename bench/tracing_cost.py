"""What tracing costs a proposal's life when no exporter is configured.

A life opens six spans (propose, decide, execute, downstream, record, reconcile), adds
ids twice, and reads or writes the stored trace context four times. With only the
OpenTelemetry API (no provider installed) each helper returns after one check and the
database is not touched; this times those calls. For scale, the same life with an SDK
provider that has no exporter (spans made and dropped; the database reads left out).
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from writegate.approval import tracing

LIVES = 20_000


class _NoRows:
    """A store whose trace context reads answer nothing, without a database."""

    def transaction(self) -> AbstractContextManager[Any]:
        return nullcontext(self)

    def get_traceparent(self, **_: Any) -> None:
        return None

    def set_traceparent(self, *_: Any) -> None:
        return None


def _one_life(store: Any) -> None:
    ids: dict[str, Any] = {"proposal_id": "prop_bench", "tenant_id": "t_bench"}
    with tracing.span("writegate.propose", root=True, **ids):
        tracing.remember(store, "prop_bench")
        tracing.annotate(request_key="k", args_digest="d")
    for name in ("writegate.decide", "writegate.execute", "writegate.reconcile"):
        parent = tracing.recall(store, proposal_id="prop_bench")
        with tracing.span(name, parent, **ids):
            if name == "writegate.execute":
                tracing.annotate(execution_id="exec_bench")
                with tracing.span("writegate.downstream"), tracing.span("writegate.record"):
                    pass


def _us_per_life(lives: int) -> float:
    store = _NoRows()
    started = time.perf_counter()
    for _ in range(lives):
        _one_life(store)
    return (time.perf_counter() - started) / lives * 1e6


def run_tracing_cost(lives: int = LIVES) -> dict[str, Any]:
    off = _us_per_life(lives)
    result: dict[str, Any] = {"lives": lives, "off_us_per_life": round(off, 2)}
    try:
        from opentelemetry.sdk.trace import TracerProvider
    except ImportError:  # the API alone: the figure that matters is the one above
        return result
    tracing.set_provider(TracerProvider())
    try:
        result["sdk_no_exporter_us_per_life"] = round(_us_per_life(lives // 10), 2)
    finally:
        tracing.set_provider(None)
    return result
