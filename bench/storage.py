"""Part 5: bytes PostgreSQL keeps per write operation, and one thread's growth.

Per operation: `pg_total_relation_size` of each table group (heap, indexes, TOAST,
free-space and visibility maps) before and after a batch on fresh threads, divided by
the batch size. Sizes grow in 8 kB pages, so a batch of a few hundred keeps the
rounding under a few per cent; dead row versions left by updates count, as they do on
disk until vacuum reuses them. The batch has a database of its own with autovacuum off:
on the one the earlier parts filled, new rows went into whatever space a vacuum had
freed there meanwhile, and the figure moved with when it had run. The one-thread runs
have another, with autovacuum on as a deployment has it.

One thread: 1,000 operations on a single thread id, each starting by clearing the
thread's messages (as a host does when a long thread starts a new task; otherwise the
messages blob, rewritten whole at every step, grows quadratically). Measured with no
pruning and with LangGraph's own `PostgresSaver.prune([thread], strategy="keep_latest")`
after every operation; the live bytes of the thread's checkpoint rows
(`pg_column_size`) are sampled along the way.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from writegate.bench.db import BenchServer, Orders, connect, disable_autovacuum, table_sizes
from writegate.bench.stats import summary_ms
from writegate.bench.workload import GraphRunner, Kind
from writegate.demo.runtime import open_demo

THREAD_BYTES_SQL = """
SELECT (SELECT coalesce(sum(pg_column_size(c.*)), 0) FROM checkpoints c
        WHERE thread_id = %(t)s)
     + (SELECT coalesce(sum(pg_column_size(b.*)), 0) FROM checkpoint_blobs b
        WHERE thread_id = %(t)s)
     + (SELECT coalesce(sum(pg_column_size(w.*)), 0) FROM checkpoint_writes w
        WHERE thread_id = %(t)s) AS bytes,
       (SELECT count(*) FROM checkpoints WHERE thread_id = %(t)s) AS checkpoints"""
SAMPLES = 10


def _delta(before: dict[str, int], after: dict[str, int], n: int) -> dict[str, float]:
    out = {k: round((after[k] - before[k]) / n, 1) for k in before}
    out["total"] = round((sum(after.values()) - sum(before.values())) / n, 1)
    return out


def per_operation(url: str, n: int, advance: Callable[[], None]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with open_demo(url, setup=False).runtime as runtime, connect(url) as conn:
        orders = Orders(runtime.pool, "sto")
        orders.reserve(2 * n + 10)
        for kind in ("baseline", "writegate"):
            runner = GraphRunner(kind, runtime, orders)
            runner.op(f"store-warm-{kind}")
            before = table_sizes(conn)
            for i in range(n):
                runner.op(f"store-{kind}-{i}")
                if i % 10 == 9:
                    advance()
            out[kind] = _delta(before, table_sizes(conn), n)
    return {"operations_each": n, "bytes_per_operation": out}


def one_thread(url: str, n: int, prune: bool, advance: Callable[[], None]) -> dict[str, Any]:
    kind: Kind = "writegate"
    thread = f"one-thread-{'pruned' if prune else 'kept'}"
    every = max(n // SAMPLES, 1)
    curve, prune_s = [], []
    with open_demo(url, setup=False).runtime as runtime, connect(url) as conn:
        orders = Orders(runtime.pool, f"one{int(prune)}_")
        orders.reserve(n + 1)
        runner = GraphRunner(kind, runtime, orders)
        saver = runtime.checkpointer
        before = table_sizes(conn)
        for i in range(1, n + 1):
            runner.op(thread, trim=True)
            if prune:
                started = time.perf_counter()
                saver.prune([thread], strategy="keep_latest")
                prune_s.append(time.perf_counter() - started)
            if i % every == 0 or i == n:
                row = conn.execute(THREAD_BYTES_SQL, {"t": thread}).fetchone()
                assert row is not None
                curve.append(
                    {
                        "operations": i,
                        "thread_live_bytes": int(row["bytes"]),
                        "checkpoints": int(row["checkpoints"]),
                    }
                )
            if i % 10 == 0:
                advance()
        after = table_sizes(conn)
    result: dict[str, Any] = {
        "operations": n,
        "pruning": "PostgresSaver.prune(keep_latest) after every operation" if prune else "none",
        "disk_bytes_added": {k: after[k] - before[k] for k in before},
        "disk_bytes_per_operation": _delta(before, after, n),
        "curve": curve,
    }
    if prune_s:
        result["prune_cost"] = summary_ms(prune_s)
    return result


def run_storage(
    server: BenchServer, n_batch: int, n_thread: int, advance: Callable[[], None]
) -> dict[str, Any]:
    batch = server.create("storage")
    disable_autovacuum(batch)
    threads = server.create("thread")  # autovacuum on: pruning's freed space is reused
    return {
        "per_operation": per_operation(batch, n_batch, advance),
        "one_thread": {
            "no_pruning": one_thread(threads, n_thread, False, advance),
            "pruned": one_thread(threads, n_thread, True, advance),
        },
    }
