"""Prometheus metrics, computed from the ledger at scrape time.

Nothing is counted in process memory: every number is a query over the executions and
the audit trail, so any replica can serve `/metrics` and all replicas agree. Labels
are bounded (operation, status); request keys and tenants stay in the audit trail.

Mount it with `prometheus_text(pool)` and `CONTENT_TYPE_LATEST` as the content type.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from writegate.checkpoints.ops import ledger_stats
from writegate.checkpoints.pool import Pool

_COUNTERS = (
    ("execute_requests", "writegate_execute_requests", "Execute requests, first or repeated."),
    (
        "duplicates",
        "writegate_duplicate_requests",
        "Execute requests for an already consumed confirmation (double clicks, retries).",
    ),
    (
        "fingerprint_conflicts",
        "writegate_fingerprint_conflicts",
        "Requests refused because their key was already used for different arguments.",
    ),
    (
        "unknown_outcomes",
        "writegate_unknown_outcomes",
        "Operations whose outcome was unknown at some point (timeout, lost answer, crash).",
    ),
    ("escalations", "writegate_escalations", "Operations handed to a person to decide."),
)


class LedgerCollector(Collector):
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    def collect(self) -> Iterator[Metric]:
        stats = ledger_stats(self.pool)
        per_op: dict[str, dict[str, int]] = stats["operations"]
        for key, name, doc in _COUNTERS:
            counter = CounterMetricFamily(name, doc, labels=["operation"])
            for operation, values in sorted(per_op.items()):
                counter.add_metric([operation], values.get(key, 0))
            yield counter
        yield GaugeMetricFamily(
            "writegate_duplicate_request_ratio",
            "Duplicate execute requests over all execute requests.",
            value=stats["totals"]["duplicate_rate"],
        )
        open_gauge = GaugeMetricFamily(
            "writegate_open_executions",
            "Executions not finished, by status.",
            labels=["operation", "status"],
        )
        for row in stats["open_executions"]:
            open_gauge.add_metric([row["operation"], row["status"]], row["n"])
        yield open_gauge
        backlog: dict[str, Any] = stats["backlog"]
        yield GaugeMetricFamily(
            "writegate_backlog_size",
            "Executions due for reconciliation.",
            value=backlog["size"],
        )
        yield GaugeMetricFamily(
            "writegate_backlog_oldest_age_seconds",
            "Age of the oldest execution due for reconciliation (0 when none).",
            value=backlog["oldest_age_s"],
        )
        yield _latency(stats["reconcile_latency"])


def _latency(latency: dict[str, Any]) -> HistogramMetricFamily:
    buckets = [(f"{le:g}", float(n)) for le, n in latency["buckets"].items()]
    buckets.append(("+Inf", float(latency["count"])))
    return HistogramMetricFamily(
        "writegate_reconcile_latency_seconds",
        "From an execution's start to the reconciler's final answer.",
        buckets=buckets,
        sum_value=latency["sum_s"],
    )


def prometheus_text(pool: Pool) -> str:
    """The metrics in Prometheus text format (version 0.0.4)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LedgerCollector(pool))
    return generate_latest(registry).decode("utf-8")


__all__ = ["CONTENT_TYPE_LATEST", "LedgerCollector", "prometheus_text"]
