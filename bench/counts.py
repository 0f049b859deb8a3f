"""Part 3: commits and statements per write operation, counted, in a database of their own.

Two independent counts. The driver: every connection of the run's pool counts its
statements and transactions by table group (`bench.counting`). The server:
`pg_stat_database.xact_commit` of the dedicated database, read when no backend is
connected (a backend flushes its counters as it exits), with autovacuum off on its
tables so nothing else commits there. `pg_stat_statements` needs a preload library the
server may not have, so it is not used. The two counts should agree, and the JSON
says whether they did. They can differ by one or two over a long run: past 100
distinct statements on a connection, psycopg's prepared-statement cache evicts one
(a DEALLOCATE, later a new prepare), which the driver-side model does not follow.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from writegate.bench.counting import Tally, counting_connection_class
from writegate.bench.db import BenchServer, Orders, disable_autovacuum, open_bench_pool
from writegate.bench.workload import GraphRunner, Kind, ledger_op, token_ledger_op
from writegate.checkpoints.pool import Pool
from writegate.demo.provider import SimulatedProvider
from writegate.demo.runtime import open_demo
from writegate.runtime.wiring import Runtime

TARGET_LEDGER_COMMITS = 3  # propose; decide + consume + claim; record
# `ledger`: the confirm taken server-side (the graph's path); `ledger_token`: the
# token handed to a client and presented back (HTTP, MCP), one commit more.
LEDGER_OPS = {"ledger": ledger_op, "ledger_token": token_ledger_op}
PATHS = ("ledger", "ledger_token", "writegate", "baseline")


def runtime_on(url: str, pool: Pool) -> Runtime:
    """The demo's wiring on a pool the bench made (here: a counting one), tombstone
    checks included; its provider is the simulator on that pool."""
    provider = SimulatedProvider(pool=pool)
    return open_demo(url, setup=False, provider=provider, pool=pool).runtime


def _count_path(server: BenchServer, url: str, path: str, orders: Orders, n: int) -> dict[str, Any]:
    tally = Tally()
    server.wait_idle(url)
    before = server.xact_commit(url)
    # One connection: with more, the async checkpoint writer's concurrency made the
    # server count one or two transactions the driver did not see in a few hundred.
    pool = open_bench_pool(url, max_size=1, connection_class=counting_connection_class(tally))
    runtime = runtime_on(url, pool)
    try:
        if path in LEDGER_OPS:
            for i in range(n):
                LEDGER_OPS[path](runtime, orders, f"count-{path}-{i}")
        else:
            kind: Kind = "writegate" if path == "writegate" else "baseline"
            runner = GraphRunner(kind, runtime, orders, provider=SimulatedProvider(pool=pool))
            for i in range(n):
                runner.op(f"count-{path}-{i}")
    finally:
        pool.close()
    server.wait_idle(url)
    server_delta = server.xact_commit(url) - before
    seen = tally.snapshot()
    per_op = {
        "statements": {k: round(v / n, 2) for k, v in sorted(seen["statements"].items())},
        "transactions": {k: round(v / n, 2) for k, v in sorted(seen["transactions"].items())},
    }
    tx = seen["transactions"]
    return {
        "operations": n,
        "per_operation": per_op,
        "statements_per_op": round(sum(seen["statements"].values()) / n, 2),
        "round_trips_per_op": round(seen["round_trips"] / n, 2),
        "durable_commits_per_op": round(
            sum(v for k, v in tx.items() if k.endswith(":write")) / n, 2
        ),
        "ledger_commits_per_op": round(tx.get("ledger:write", 0) / n, 2),
        "checkpointer_commits_per_op": round(tx.get("checkpointer:write", 0) / n, 2),
        "connections_opened": seen["connections"],
        "server_xact_commit_delta": server_delta,
        "driver_transactions_plus_connections": tally.server_equivalent(),
        "server_and_driver_agree": server_delta == tally.server_equivalent(),
        "server_minus_driver": server_delta - tally.server_equivalent(),
    }


def run_counts(server: BenchServer, n: int, advance: Callable[[], None]) -> dict[str, Any]:
    url = server.create("count")
    try:
        with open_demo(url, setup=False, max_connections=2).runtime as seeding:
            orders = Orders(seeding.pool, "cnt", chunk=n * len(PATHS) + 10)
            orders.reserve(n * len(PATHS) + 10)
        disable_autovacuum(url)
        paths = {}
        for path in PATHS:
            paths[path] = _count_path(server, url, path, orders, n)
            advance()
    finally:
        server.drop(url)
    ledger = paths["ledger"]["ledger_commits_per_op"]
    return {
        "method": "driver: counting psycopg cursor/connection on every pooled connection; "
        "server: pg_stat_database.xact_commit delta on a dedicated database",
        "paths": paths,
        "ledger_commits_per_write": ledger,
        "target_ledger_commits": TARGET_LEDGER_COMMITS,
        "meets_target": ledger <= TARGET_LEDGER_COMMITS,
        "checkpointer_commits_writegate": paths["writegate"]["checkpointer_commits_per_op"],
        "checkpointer_commits_baseline": paths["baseline"]["checkpointer_commits_per_op"],
    }
