"""Part 6: does the ledger stay fast as it grows? 10x the rows, same per-user work.

In a scratch database of its own: make N proposals (10% pending, half of those stale,
1% of executions `unknown`), then time a user's pending list, the batched expiry sweep
and the reconcile backlog, with their plans; then time the same probes again inside a
transaction that drops the index they rely on (rolled back after), to show what the
index is for. Repeated at two sizes. The reconciler (`approval.reconcile` over
`checkpoints.ops.PgBacklog`) drains the backlog when the code base has it; otherwise
only its pickup query is timed, and the JSON says so.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from psycopg import Connection, sql
from psycopg.rows import DictRow

from writegate.bench import scale_sql as q
from writegate.bench.db import BenchServer, connect
from writegate.checkpoints.namespace import DEFAULT_SCHEMA
from writegate.demo.runtime import open_demo

SWEEP_BATCH = 1000
PROBE_REPEAT = 30


def _ms(fn: Callable[[], Any], repeat: int = PROBE_REPEAT) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return round(statistics.median(times) * 1000, 3)


def _plan(conn: Connection[DictRow], query: str, params: Any = None) -> list[str]:
    rows = conn.execute("EXPLAIN (COSTS OFF) " + query, params).fetchall()
    return [str(next(iter(r.values()))) for r in rows]


def _uses_index(plan: list[str], index: str) -> bool:
    return any(index in line for line in plan)


def _fill(conn: Connection[DictRow], n: int) -> None:
    params = {"n": n, "users": max(n // 100, 1), "tenant": q.TENANT}
    with conn.transaction():
        conn.execute(q.TRUNCATE_SQL)
        for statement in (
            q.INSERT_PROPOSALS_SQL,
            q.INSERT_TOKENS_SQL,
            q.INSERT_EXECUTIONS_SQL,
            q.INSERT_PROVIDER_SQL,
        ):
            conn.execute(statement, params)
    conn.execute(q.ANALYZE_SQL)


def _probes(conn: Connection[DictRow], users: int) -> dict[str, Callable[[], Any]]:
    counter = iter(range(10**9))

    def list_pending() -> Any:
        user = f"user_{next(counter) % users}"
        return conn.execute(q.LIST_PENDING_SQL, (q.TENANT, user)).fetchall()

    def backlog() -> Any:
        with conn.transaction():
            return conn.execute(q.BACKLOG_PROBE_SQL).fetchall()

    return {
        "list_pending": list_pending,
        "expire_stale": lambda: conn.execute(q.STALE_PROBE_SQL).fetchall(),
        "reconcile_backlog": backlog,
    }


def _plans(conn: Connection[DictRow]) -> dict[str, list[str]]:
    return {
        "list_pending": _plan(conn, q.LIST_PENDING_SQL, (q.TENANT, "user_1")),
        "expire_stale": _plan(conn, q.SWEEP_SQL, (SWEEP_BATCH,)),
        "reconcile_backlog": _plan(conn, q.BACKLOG_PROBE_SQL),
    }


def _sweep(conn: Connection[DictRow]) -> dict[str, Any]:
    started, expired, batches = time.perf_counter(), 0, 0
    while True:
        with conn.transaction():
            done = conn.execute(q.SWEEP_SQL, (SWEEP_BATCH,)).rowcount
        batches += 1
        expired += done
        if done < SWEEP_BATCH:
            break
    seconds = time.perf_counter() - started
    return {
        "expired": expired,
        "batches": batches,
        "seconds": round(seconds, 3),
        "us_per_row": round(seconds / max(expired, 1) * 1e6, 1),
    }


def _drain(url: str, conn: Connection[DictRow]) -> dict[str, Any]:
    try:
        from writegate.approval.reconcile import Reconciler
        from writegate.checkpoints.ops import PgBacklog
    except ImportError:  # the reconciler is not in this code base: time its pickup only
        started = time.perf_counter()
        n = len(_probes(conn, 1)["reconcile_backlog"]())
        return {
            "with": "backlog pickup query only (no reconciler in this code base)",
            "picked": n,
            "seconds": round(time.perf_counter() - started, 3),
        }
    with open_demo(url, setup=False, max_connections=4) as runtime:
        reconciler = Reconciler(runtime.service, PgBacklog(runtime.pool))
        started = time.perf_counter()
        settled = reconciler.drain(limit=100)
        seconds = time.perf_counter() - started
    actions: dict[str, int] = {}
    for item in settled:
        actions[item.action] = actions.get(item.action, 0) + 1
    return {
        "with": "approval.reconcile.Reconciler.drain(limit=100) over checkpoints.ops.PgBacklog",
        "settled": len(settled),
        "actions": actions,
        "seconds": round(seconds, 3),
        "ms_per_execution": round(seconds / max(len(settled), 1) * 1000, 3),
    }


def _without_index(
    conn: Connection[DictRow], name: str, probe: Callable[[], Any], query: str, params: Any
) -> dict[str, Any]:
    """Drop the index in a transaction, time the probe and read the plan, roll back."""
    index = q.INDEX_FOR[name]
    with conn.transaction(force_rollback=True):
        conn.execute(sql.SQL(q.DROP_INDEX_SQL).format(sql.Identifier(DEFAULT_SCHEMA, index)))
        plan = _plan(conn, query, params)
        return {"dropped": index, "probe_ms": _ms(probe, 10), "plan": plan}


def _measure(url: str, n: int) -> dict[str, Any]:
    with connect(url) as conn:
        _fill(conn, n)
        users = max(n // 100, 1)
        probes = _probes(conn, users)
        plans = _plans(conn)
        out: dict[str, Any] = {
            "proposals": n,
            "pending": n // 10,
            "stale": n // 20,
            "backlog": n // 100,
            "users": users,
        }
        out["list_pending_ms"] = _ms(probes["list_pending"])
        out["expire_sweep"] = _sweep(conn)
        out["stale_probe_after_sweep_ms"] = _ms(probes["expire_stale"])
        out["reconcile"] = _drain(url, conn)
        out["backlog_probe_after_drain_ms"] = _ms(probes["reconcile_backlog"])
        out["plans"] = plans
        out["index_used"] = {k: _uses_index(p, q.INDEX_FOR[k]) for k, p in plans.items()}
        args = {
            "list_pending": (q.LIST_PENDING_SQL, (q.TENANT, "user_1")),
            "expire_stale": (q.STALE_PROBE_SQL, None),
            "reconcile_backlog": (q.BACKLOG_PROBE_SQL, None),
        }
        out["without_index"] = {
            name: _without_index(conn, name, probes[name], *args[name]) for name in probes
        }
    return out


def run_scale(
    server: BenchServer, sizes: tuple[int, int], advance: Callable[[], None]
) -> dict[str, Any]:
    url = server.create("scale")
    try:
        results = []
        for n in sizes:
            results.append(_measure(url, n))
            advance()
    finally:
        server.drop(url)
    small, large = results
    return {
        "sizes": list(sizes),
        "results": results,
        "growth": {
            "list_pending_ms": [small["list_pending_ms"], large["list_pending_ms"]],
            "expire_us_per_row": [
                small["expire_sweep"]["us_per_row"],
                large["expire_sweep"]["us_per_row"],
            ],
            "stale_probe_ms": [
                small["stale_probe_after_sweep_ms"],
                large["stale_probe_after_sweep_ms"],
            ],
            "backlog_probe_ms": [
                small["backlog_probe_after_drain_ms"],
                large["backlog_probe_after_drain_ms"],
            ],
            "without_index_probe_ms": {
                k: [small["without_index"][k]["probe_ms"], large["without_index"][k]["probe_ms"]]
                for k in q.INDEX_FOR
            },
        },
    }
