"""Run the whole benchmark: every part, with progress, into one results dictionary.

`run_bench(options)` creates the bench's databases on the server, runs its parts in
order, drops the databases (unless `keep`), and returns the figures; `report` turns
them into tables, a JSON file and a chart. The machine description travels with the
figures, since they mean little without it.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

from writegate.bench.compare import run_attribution, run_compare
from writegate.bench.counts import run_counts
from writegate.bench.db import BenchServer
from writegate.bench.http_storm import run_http_storm
from writegate.bench.ledger import run_ledger
from writegate.bench.middleware import run_middleware
from writegate.bench.profile import run_profile
from writegate.bench.scale import run_scale
from writegate.bench.storage import run_storage
from writegate.bench.storm import run_storm
from writegate.bench.targets import build_targets
from writegate.bench.tracing_cost import run_tracing_cost
from writegate.bench.verdict import explain_cost
from writegate.checkpoints.database import describe_database


@dataclass(frozen=True)
class Options:
    """How much of each part to run. `quick()` is the smoke-test size."""

    ops: int = 300
    attribution_ops: int = 60
    ledger_seconds: float = 3.0
    count_ops: int = 50
    storm_clients: int = 64
    storm_rounds: int = 5
    http_clicks: int = 64
    http_rounds: int = 5
    storage_ops: int = 200
    thread_ops: int = 1000
    scale_sizes: tuple[int, int] = (10_000, 100_000)
    profile_ops: int = 40

    @classmethod
    def full(cls, ops: int = 300) -> Options:
        return cls(ops=ops, attribution_ops=max(ops // 5, 10))

    @classmethod
    def quick(cls, ops: int = 10) -> Options:
        return cls(
            ops=ops,
            attribution_ops=3,
            ledger_seconds=0.3,
            count_ops=4,
            storm_clients=16,
            storm_rounds=2,
            http_clicks=16,
            http_rounds=1,
            storage_ops=6,
            thread_ops=12,
            scale_sizes=(1_000, 5_000),
            profile_ops=2,
        )


def machine(server_url: str) -> dict[str, Any]:
    with psycopg.connect(server_url, autocommit=True) as conn:
        version = conn.execute("SHOW server_version").fetchone()
        sync = conn.execute("SHOW synchronous_commit").fetchone()
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in load] if load else None,
        "postgres": version[0] if version else None,
        "synchronous_commit": sync[0] if sync else None,
        "server": describe_database(server_url),
    }


@contextmanager
def _progress(console: Console) -> Iterator[Callable[[str, int], Callable[[], None]]]:
    columns = (
        TextColumn("{task.description:<34}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:

        def task(name: str, total: int) -> Callable[[], None]:
            task_id = progress.add_task(name, total=total)
            return lambda: progress.advance(task_id)

        yield task


def run_bench(
    server_url: str, options: Options, *, keep: bool = False, console: Console | None = None
) -> dict[str, Any]:
    console = console or Console()
    server = BenchServer(server_url, keep=keep)
    o = options
    results: dict[str, Any] = {
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "options": asdict(o),
        "machine": machine(server_url),
        "database_prefix": server.prefix,
    }
    began = time.perf_counter()
    seconds: dict[str, float] = {}
    results["part_seconds"] = seconds

    def part(name: str, run: Callable[[], dict[str, Any]]) -> None:
        started = time.perf_counter()
        results[name] = run()
        seconds[name] = round(time.perf_counter() - started, 1)

    try:
        url = server.create()
        with _progress(console) as task:
            steps = 3 * (o.attribution_ops + 2)
            thread_steps = (2 * o.storage_ops + 2 * o.thread_ops) // 10
            part("compare", lambda: run_compare(url, o.ops, task("1 baseline vs writegate", o.ops)))
            part(
                "attribution",
                lambda: run_attribution(
                    url, o.attribution_ops, task("1 where the time goes", steps)
                ),
            )
            part(
                "middleware",
                lambda: run_middleware(
                    url, o.ops, task("1c wg.middleware vs LangChain HITL", o.ops)
                ),
            )
            part("ledger", lambda: run_ledger(url, o.ledger_seconds, task("2 ledger alone", 3)))
            part(
                "counts",
                lambda: run_counts(server, o.count_ops, task("3 commits and statements", 3)),
            )
            part(
                "storm",
                lambda: run_storm(
                    url, o.storm_clients, o.storm_rounds, task("4 confirm storm", o.storm_rounds)
                ),
            )
            part(
                "http_storm",
                lambda: run_http_storm(
                    server,
                    o.http_clicks,
                    o.http_rounds,
                    task("4b HTTP storm, 2 replicas", o.http_rounds),
                ),
            )
            part(
                "storage",
                lambda: run_storage(
                    server, o.storage_ops, o.thread_ops, task("5 storage", thread_steps)
                ),
            )
            part("scale", lambda: run_scale(server, o.scale_sizes, task("6 scale", 2)))
            part("tracing", run_tracing_cost)
            part("profile", lambda: run_profile(url, o.profile_ops, task("7 CPU by package", 3)))
    finally:
        left = server.drop_all()
        results["databases_kept"] = left
    results["cost"] = explain_cost(results)
    results["targets"] = build_targets(results)
    results["seconds"] = round(time.perf_counter() - began, 1)
    return results
