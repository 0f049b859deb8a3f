"""Part 2: the protocol alone (propose, confirm, execute, receipt) and raw commit speed.

Each concurrency level runs for a fixed time with one thread per worker, every
thread taking its own pooled connection per transaction (the pool holds one per
worker, plus room for the provider's). The raw rate is single-row INSERTs into a
scratch table, one per transaction, with synchronous_commit on, on the same database:
so a ledger operation's latency reads as "N durable commits' worth".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

from writegate.bench.db import Orders, open_bench_pool
from writegate.bench.stats import summary_ms
from writegate.bench.workload import ledger_op
from writegate.demo.runtime import open_demo

CONCURRENCY = (1, 4, 16)
CREATE_PROBE_SQL = "CREATE TABLE IF NOT EXISTS bench_commit_probe (id bigserial PRIMARY KEY)"
PROBE_INSERT_SQL = "INSERT INTO bench_commit_probe DEFAULT VALUES"
ROUND_TRIP_SQL = "SELECT 1"
ROUND_TRIPS = 2000
SYNC_COMMIT_SQL = "SELECT current_setting('synchronous_commit') AS v"


def _timed_threads(n: int, seconds: float, work: Callable[[int, int], float]) -> list[float]:
    """Run `work(worker, i)` in n threads until `seconds` pass; every call's latency."""
    latencies: list[list[float]] = [[] for _ in range(n)]
    start = threading.Barrier(n + 1)
    stop_at: list[float] = []

    def loop(worker: int) -> None:
        start.wait()
        i = 0
        while time.perf_counter() < stop_at[0]:
            latencies[worker].append(work(worker, i))
            i += 1

    threads = [threading.Thread(target=loop, args=(w,)) for w in range(n)]
    for t in threads:
        t.start()
    stop_at.append(time.perf_counter() + seconds)
    start.wait()
    for t in threads:
        t.join()
    return [x for per in latencies for x in per]


def _run_level(url: str, n: int, seconds: float) -> tuple[dict[str, Any], dict[str, Any]]:
    with open_demo(url, setup=False, max_connections=n + 2).runtime as runtime:
        orders = Orders(runtime.pool, f"led{n}_", chunk=2000)
        orders.reserve(2000)
        ledger_op(runtime, orders, f"ledger-warm-{n}")
        began = time.perf_counter()
        lat = _timed_threads(n, seconds, lambda w, i: ledger_op(runtime, orders, f"l{n}-{w}-{i}"))
        wall = time.perf_counter() - began
    ledger = {"concurrency": n, "ops_per_s": round(len(lat) / wall, 1), **summary_ms(lat)}
    pool = open_bench_pool(url, max_size=n)
    try:

        def commit(worker: int, i: int) -> float:
            with pool.connection() as conn:
                started = time.perf_counter()
                conn.execute(PROBE_INSERT_SQL)
                return time.perf_counter() - started

        began = time.perf_counter()
        lat = _timed_threads(n, seconds / 2, commit)
        wall = time.perf_counter() - began
    finally:
        pool.close()
    commits = {"concurrency": n, "commits_per_s": round(len(lat) / wall, 1), **summary_ms(lat)}
    return ledger, commits


def round_trip(url: str, n: int) -> dict[str, Any]:
    """A prepared one-row SELECT: the price of one loopback round trip, no commit to flush."""
    with psycopg.connect(url, autocommit=True, prepare_threshold=0) as conn:
        lat = []
        for _ in range(n):
            started = time.perf_counter()
            conn.execute(ROUND_TRIP_SQL).fetchone()
            lat.append(time.perf_counter() - started)
    return summary_ms(lat)


def run_ledger(url: str, seconds: float, advance: Callable[[], None]) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(CREATE_PROBE_SQL)
        row = conn.execute(SYNC_COMMIT_SQL).fetchone()
    rtt = round_trip(url, ROUND_TRIPS if seconds >= 1 else ROUND_TRIPS // 10)
    levels, commits = [], []
    for n in CONCURRENCY:
        ledger, commit = _run_level(url, n, seconds)
        ledger["commits_worth"] = round(ledger["median_ms"] / commit["median_ms"], 1)
        levels.append(ledger)
        commits.append(commit)
        advance()
    return {
        "seconds_per_level": seconds,
        "synchronous_commit": row[0] if row else None,
        "ledger": levels,
        "single_row_commits": commits,
        "round_trip": rtt,
        "note": "commits_worth = ledger operation median / single-row commit median, "
        "same concurrency",
    }
