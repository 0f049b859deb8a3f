"""Part 6: does the ledger stay fast as it grows? 10x the rows, same per-user work.

In a scratch database of its own per size: the ledger store writes N proposals with
their tokens and executions (`PgLedgerTx.load`; 10% pending, half of those stale, 1% of
executions `unknown`), then a user's pending list, the expiry sweep (the approval
service's `expire_if_due`, a batch per transaction) and the reconcile backlog are
timed, with their plans, each by the product's own statement (`bench/scale_sql.py`);
then the same probes again inside a transaction that drops the indexes they rely on
(rolled back after), to show what the indexes are for. The reconciler
(`approval.reconcile` over `checkpoints.ops.PgBacklog`) drains the backlog. Nothing
here writes or reads a ledger table by hand: a column change is the product's to follow.
"""

from __future__ import annotations

import hashlib
import statistics
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from psycopg import Connection, sql
from psycopg.rows import DictRow

from writegate.approval.models import (
    Execution,
    ExecutionStatus,
    Identity,
    Proposal,
    ProposalStatus,
    Token,
    TokenStatus,
)
from writegate.approval.reconcile import Reconciler
from writegate.bench import scale_sql as q
from writegate.bench.db import BenchServer, connect
from writegate.checkpoints.namespace import DEFAULT_SCHEMA
from writegate.checkpoints.ops import PgBacklog
from writegate.demo.runtime import open_demo
from writegate.runtime.wiring import Runtime

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


def _uses_index(plan: list[str], indexes: tuple[str, ...]) -> bool:
    return any(index in line for line in plan for index in indexes)


SEED_CHUNK = 5000  # proposals per `load` (and their tokens and executions)


def _rows(
    g: int, users: int, n: int, now: datetime
) -> tuple[Proposal, Token | None, Execution | None]:
    """Row g of n: of every 10 proposals one pending (every other one of those already
    past expiry), one declined, eight executed; 1 in 100 executions `unknown`."""
    user, key = f"user_{(g // 10) % users}", f"refund_order:{q.TENANT}:order:o{g}:p{g}"
    args = {"order_id": f"o{g}", "amount_minor": 1000, "currency": "CNY", "reason": "scale test"}
    pending, declined = g % 10 == 0, g % 10 == 1
    proposal = Proposal(
        proposal_id=f"p{g}", thread_id=f"t{g}", tool_call_id="call_1", subject=user,
        tenant_id=q.TENANT, operation="refund_order", resource=f"order:o{g}", args=args,
        args_digest=_md5(f"a{g}"), fingerprint=_md5(f"f{g}"), state_version=1,
        preview={"title": f"Refund order o{g}", "impact": "x" * 200}, policy_version="v1",
        request_key=key,
        status=ProposalStatus.AWAITING if pending
        else ProposalStatus.DECLINED if declined else ProposalStatus.EXECUTED,
        decided_by=None if pending else user, decided_at=None if pending else now,
        created_at=now - timedelta(seconds=n - g),
        expires_at=now - timedelta(minutes=1) if g % 20 == 0 else now + timedelta(hours=1),
    )  # fmt: skip
    if pending or declined:
        return proposal, None, None
    token = Token(
        token_hash=_md5(f"h{g}"), proposal_id=proposal.proposal_id, audience="writegate",
        policy_version="v1", issued_at=now, expires_at=now + timedelta(minutes=5),
        status=TokenStatus.CONSUMED, execution_id=f"e{g}",
    )  # fmt: skip
    lost, before = g % 100 == 2, now - timedelta(minutes=10)
    execution = Execution(
        execution_id=f"e{g}", request_key=key, token_hash=token.token_hash,
        proposal_id=proposal.proposal_id, tenant_id=q.TENANT, subject=user,
        operation="refund_order", resource=proposal.resource, args=args,
        args_digest=proposal.args_digest, fingerprint=proposal.fingerprint,
        status=ExecutionStatus.UNKNOWN if lost else ExecutionStatus.SUCCEEDED, attempts=1,
        lease_owner="old-worker", lease_expires_at=before,
        provider_ref=None if lost else f"re_{g}",
        result=None if lost else {"refund_id": f"r{g}"},
        created_at=before, updated_at=before, completed_at=None if lost else now,
    )  # fmt: skip
    return proposal, token, execution


def _md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


def seed(runtime: Runtime, n: int) -> None:
    """n proposals with their tokens and executions, written by the ledger store's
    `load` in chunks, in one transaction; the provider's rows beside them. Each user has
    100 proposals whatever n (users = n / 100), so a user's pending list is the same
    size at 10k and at 100k rows."""
    users = max(n // 100, 1)
    with runtime.store.transaction() as tx:
        now = tx.now()
        for first in range(1, n + 1, SEED_CHUNK):
            made = [_rows(g, users, n, now) for g in range(first, min(first + SEED_CHUNK, n + 1))]
            tx.load(
                [p for p, _, _ in made],
                [t for _, t, _ in made if t is not None],
                [e for _, _, e in made if e is not None],
            )
        params = {"n": n, "tenant": q.TENANT}
        tx.conn.execute(q.INSERT_PROVIDER_SQL, params)
    with runtime.pool.connection() as conn:
        conn.execute(q.ANALYZE_SQL)


def _rolled_back(conn: Connection[DictRow], query: str, params: Any) -> Any:
    """`query` run in a transaction that is rolled back: a pick or a claim locks or
    claims nothing past the probe."""
    with conn.transaction(force_rollback=True):
        return conn.execute(query, params).fetchall()


def _probes(conn: Connection[DictRow], users: int) -> dict[str, Callable[[], Any]]:
    counter = iter(range(10**9))

    def list_pending() -> Any:
        return conn.execute(*q.list_pending(f"user_{next(counter) % users}")).fetchall()

    stale = {"batch": SWEEP_BATCH}
    return {
        "list_pending": list_pending,
        "expire_stale": lambda: _rolled_back(conn, q.STALE_PICK_SQL, stale),
        "reconcile_backlog": lambda: _rolled_back(conn, q.BACKLOG_CLAIM_SQL, q.BACKLOG_CLAIM),
    }


# Each probe's statement and parameters, as explained (plans, and without its index).
def _explained() -> dict[str, tuple[str, Any]]:
    return {
        "list_pending": q.list_pending("user_1"),
        "expire_stale": (q.STALE_PICK_SQL, {"batch": SWEEP_BATCH}),
        "reconcile_backlog": (q.BACKLOG_CLAIM_SQL, q.BACKLOG_CLAIM),
    }


def _plans(conn: Connection[DictRow]) -> dict[str, list[str]]:
    return {name: _plan(conn, query, params) for name, (query, params) in _explained().items()}


def _sweep(runtime: Runtime) -> dict[str, Any]:
    """Stale proposals expired by the approval service (`expire_if_due`: the move and its
    audit row), a batch of SWEEP_BATCH picked and expired per transaction."""
    sweeper = Identity(user_id="system:expiry", tenant_id=q.TENANT)
    started, expired, batches = time.perf_counter(), 0, 0
    while True:
        with runtime.store.transaction() as tx:
            picked = tx.conn.execute(q.STALE_PICK_SQL, {"batch": SWEEP_BATCH}).fetchall()
            done = 0
            for row in picked:
                proposal = tx.get_proposal(row["proposal_id"])
                assert proposal is not None
                done += runtime.service.expire_if_due(tx, sweeper, proposal, started) is not None
        batches += 1
        expired += done
        if len(picked) < SWEEP_BATCH:
            break
    seconds = time.perf_counter() - started
    return {
        "expired": expired,
        "batches": batches,
        "seconds": round(seconds, 3),
        "us_per_row": round(seconds / max(expired, 1) * 1e6, 1),
    }


def _drain(runtime: Runtime) -> dict[str, Any]:
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
    """Drop the indexes in a transaction, time the probe and read the plan, roll back."""
    indexes = q.INDEX_FOR[name]
    with conn.transaction(force_rollback=True):
        for index in indexes:
            conn.execute(sql.SQL(q.DROP_INDEX_SQL).format(sql.Identifier(DEFAULT_SCHEMA, index)))
        plan = _plan(conn, query, params)
        return {"dropped": ", ".join(indexes), "probe_ms": _ms(probe, 10), "plan": plan}


def _measure(server: BenchServer, n: int) -> dict[str, Any]:
    """In a database of its own: n proposals, then the probes, the sweep and the drain."""
    url = server.create(f"scale_{n}")
    try:
        with (
            open_demo(url, setup=False, max_connections=4).runtime as runtime,
            connect(url) as conn,
        ):
            seeding = time.perf_counter()
            seed(runtime, n)
            seeded = time.perf_counter() - seeding
            users = max(n // 100, 1)
            probes = _probes(conn, users)
            plans = _plans(conn)
            out: dict[str, Any] = {
                "proposals": n,
                "pending": n // 10,
                "stale": n // 20,
                "backlog": n // 100,
                "users": users,
                "seed_seconds": round(seeded, 2),
            }
            out["list_pending_ms"] = _ms(probes["list_pending"])
            out["expire_sweep"] = _sweep(runtime)
            out["stale_probe_after_sweep_ms"] = _ms(probes["expire_stale"])
            out["reconcile"] = _drain(runtime)
            out["backlog_probe_after_drain_ms"] = _ms(probes["reconcile_backlog"])
            out["plans"] = plans
            out["index_used"] = {k: _uses_index(p, q.INDEX_FOR[k]) for k, p in plans.items()}
            args = _explained()
            out["without_index"] = {
                name: _without_index(conn, name, probes[name], *args[name]) for name in probes
            }
    finally:
        server.drop(url)
    return out


def run_scale(
    server: BenchServer, sizes: tuple[int, int], advance: Callable[[], None]
) -> dict[str, Any]:
    results = []
    for n in sizes:
        results.append(_measure(server, n))
        advance()
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
