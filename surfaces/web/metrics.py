"""Prometheus metrics of the HTTP service, in a registry of the app's own.

Requests by route template (never by raw path, which would explode the label set),
their latency, and decisions by action and HTTP status. `/metrics` also appends the
ledger's metrics from `graph.metrics.prometheus_text` when that module is present.
"""

from __future__ import annotations

import importlib
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest


class HttpMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "writegate_http_requests_total",
            "HTTP requests by method, route template and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "writegate_http_request_duration_seconds",
            "HTTP request latency (for event streams: until the stream ends).",
            ["method", "route"],
            registry=self.registry,
        )
        self.decisions = Counter(
            "writegate_http_decisions_total",
            "Approval decisions by action and answer status.",
            ["action", "status"],
            registry=self.registry,
        )

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(method, route).observe(seconds)

    def render(self, pool: Any) -> str:
        return generate_latest(self.registry).decode("utf-8") + _ledger_metrics(pool)


def _ledger_metrics(pool: Any) -> str:
    """The ledger's own metrics (graph.metrics), when that module is installed."""
    try:
        module: Any = importlib.import_module("writegate.surfaces.metrics")
    except ImportError:
        return ""
    render = getattr(module, "prometheus_text", None)
    return str(render(pool)) if render is not None else ""
