"""Part 4: the confirm storm. N threads, each on its own connection, confirm and execute
one proposal at the same moment, as the same person: exactly one execution, always.

Each thread has a ledger store over its own single connection (so the storm really is
N sessions racing on row locks), releases on a shared barrier, calls decide(Confirm)
and then execute with the token it got, and records how long its answer took and
what it was: a receipt, or the refusal's code.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

import psycopg
from psycopg import Connection
from psycopg.rows import DictRow, dict_row

from writegate.approval.decisions import Confirm
from writegate.approval.errors import WritegateError
from writegate.approval.execution import Executor
from writegate.approval.service import ApprovalService, Confirmation
from writegate.bench.db import REFUND_AMOUNT, Orders
from writegate.bench.stats import summary_ms
from writegate.bench.workload import IDENTITY, refund_args
from writegate.checkpoints.ledger import PgLedgerStore
from writegate.checkpoints.namespace import DEFAULT_SCHEMA
from writegate.checkpoints.pool import Pool
from writegate.demo.domain import domain_tools
from writegate.demo.policy import demo_policy
from writegate.demo.provider import SimulatedProvider
from writegate.demo.runtime import open_demo
from writegate.runtime.wiring import Runtime
from writegate.tools.registry import Registry

PROVIDER_SQL = "SELECT count(*) AS n FROM provider.refunds WHERE order_id = %s"
REFUNDED_SQL = "SELECT refunded_minor FROM orders WHERE order_id = %s"


class OneConnection:
    """The slice of a pool the ledger uses, over one dedicated connection."""

    def __init__(self, url: str) -> None:
        self.conn: Connection[DictRow] = psycopg.connect(
            url, autocommit=True, prepare_threshold=0, row_factory=dict_row
        )
        self.lock = threading.Lock()
        self.schema = DEFAULT_SCHEMA

    @contextmanager
    def connection(self) -> Iterator[Connection[DictRow]]:
        with self.lock:  # the provider and the ledger never overlap in one thread
            yield self.conn

    def close(self) -> None:
        self.conn.close()


def _worker(url: str) -> tuple[OneConnection, ApprovalService, Executor]:
    conn = OneConnection(url)
    pool = cast(Pool, conn)
    tools = Registry(tool.spec for tool in domain_tools(SimulatedProvider(pool=pool)))
    service = ApprovalService(PgLedgerStore(pool), tools, demo_policy())
    return conn, service, Executor(service)


def _answer(service: ApprovalService, executor: Executor, proposal_id: str) -> str:
    try:
        decided = service.decide(IDENTITY, Confirm(action="confirm", proposal_id=proposal_id))
        assert isinstance(decided, Confirmation)
        receipt = executor.execute(
            IDENTITY, decided.token, proposal_id=proposal_id, operation="refund_order"
        )
        return f"receipt:{receipt.status}"
    except WritegateError as exc:
        return exc.code


def run_storm(url: str, n: int, rounds: int, advance: Callable[[], None]) -> dict[str, Any]:
    workers = [_worker(url) for _ in range(n)]
    results = []
    try:
        with open_demo(url, setup=False, max_connections=2).runtime as runtime:
            orders = Orders(runtime.pool, "storm", chunk=rounds)
            for r in range(rounds):
                order = orders.take()
                proposal = runtime.service.propose(
                    IDENTITY,
                    thread_id=f"storm-{r}",
                    tool_call_id="call_1",
                    tool_name="refund_order",
                    raw_args=refund_args(order),
                )
                results.append(_round(workers, runtime, proposal.proposal_id, order))
                advance()
    finally:
        for conn, _, _ in workers:
            conn.close()
    latencies = [s for r in results for s in r.pop("latencies")]
    cpus = [r.pop("cpu") for r in results]
    return {
        "concurrent_confirms": n,
        "rounds": rounds,
        "executions_per_round": [r["executions"] for r in results],
        "exactly_one_every_time": all(r["exactly_one"] for r in results),
        "answers": dict(sum((Counter(r["answers"]) for r in results), Counter())),
        "latency": summary_ms(latencies),
        # The answering thread's own CPU: one interpreter runs one thread at a time, so
        # a round's answers queue for about the sum of theirs.
        "cpu_per_answer": summary_ms([c for per in cpus for c in per]),
        "cpu_per_round_ms": round(statistics.median(sum(per) for per in cpus) * 1000, 1),
        "per_round": results,
    }


def _value(conn: Connection[DictRow], query: str, param: str) -> Any:
    row = conn.execute(query, (param,)).fetchone()
    return next(iter(row.values())) if row else None


def _round(
    workers: list[tuple[OneConnection, ApprovalService, Executor]],
    runtime: Runtime,
    proposal_id: str,
    order: str,
) -> dict[str, Any]:
    barrier = threading.Barrier(len(workers))
    answers: list[str] = [""] * len(workers)
    latencies = [0.0] * len(workers)
    cpu = [0.0] * len(workers)

    def run(i: int) -> None:
        _, service, executor = workers[i]
        barrier.wait()
        started, cpu_started = time.perf_counter(), time.thread_time()
        answers[i] = _answer(service, executor, proposal_id)
        latencies[i] = time.perf_counter() - started
        cpu[i] = time.thread_time() - cpu_started

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(workers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with runtime.store.reading() as tx:  # at most one: an execution's proposal is unique
        executions = int(tx.get_execution(proposal_id=proposal_id) is not None)
    with runtime.pool.connection() as conn:
        provider = _value(conn, PROVIDER_SQL, order)
        refunded = _value(conn, REFUNDED_SQL, order)
    return {
        "executions": executions,
        "provider_refunds": provider,
        "refunded_minor": refunded,
        "exactly_one": executions == 1 and provider == 1 and refunded == REFUND_AMOUNT,
        "answers": dict(Counter(answers)),
        "latencies": latencies,
        "cpu": cpu,
    }
