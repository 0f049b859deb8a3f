"""Failover soaks on a private pg_auto_failover cluster (tests/integration/failover_soak.py):
the primary is SIGKILLed under confirmed writes, the standby promoted; no writegate
process is restarted, no operation is lost or done twice.

The short versions run in every suite (a few operations, a few failovers each); the
full ones are opt-in (docs/operations.md):

    WRITEGATE_FAILOVER_SOAK=full uv run pytest -q -s tests/integration/test_failover.py

WRITEGATE_SOAK_OPS, WRITEGATE_SOAK_SEED and WRITEGATE_SOAK_FAILOVERS set the size, the
seed and the number of failovers of either.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.app_db import setup_app
from tests.integration import ha_cluster
from tests.integration.failover_soak import Figures, run_failover_soak
from tests.integration.ha_cluster import HaCluster
from tests.integration.soak import settings
from writegate.checkpoints.outage import is_outage
from writegate.demo.runtime import open_demo
from writegate.surfaces.store.http_store import HttpStore

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(ha_cluster.available() is not None, reason=str(ha_cluster.available())),
]
FULL = os.environ.get("WRITEGATE_FAILOVER_SOAK") == "full"


PORT_SQL = "SELECT inet_server_port() AS port"


def serving_again(attempt: Callable[[], Any], deadline_s: float = 30.0) -> Any:
    """Call `attempt` until it stops failing for the database's absence."""
    end = time.monotonic() + deadline_s
    while True:
        try:
            return attempt()
        except Exception as exc:  # an outage, mapped or not: try again
            if not (is_outage(exc) or getattr(exc, "code", "") == "temporarily_unavailable"):
                raise
            if time.monotonic() > end:
                raise
        time.sleep(0.02)


def test_every_path_follows_the_new_primary_without_a_restart() -> None:
    """The pool, LangGraph's saver on it and the thread locks' own pool, opened on the
    multi-host URL before the failover, reach the promoted standby by themselves, within
    a second of its promotion (psycopg_pool's own backoff took 2.8 s more)."""
    cluster = HaCluster().start()
    try:
        url = cluster.create_database("writegate_paths")
        setup_app(url)  # migrations over the multi-host URL: on the primary
        rt = open_demo(url, setup=False).runtime
        store = HttpStore(rt.pool, url)
        config = {"configurable": {"thread_id": "t-paths", "checkpoint_ns": ""}}
        try:
            first = cluster.primary()
            with rt.pool.connection() as conn:
                assert conn.execute(PORT_SQL).fetchone()["port"] == first.port
            with store.thread_lock("t-paths", wait_s=1):
                pass
            rt.checkpointer.get_tuple(config)  # type: ignore[arg-type]
            killed = time.monotonic()
            old = cluster.kill_primary()
            promoted: list[float] = []
            waiting = threading.Thread(
                target=lambda: promoted.append((cluster.wait_promoted(old), time.monotonic())[1])
            )
            waiting.start()

            def through_the_pool() -> int:
                with rt.pool.connection() as conn:
                    return int(conn.execute(PORT_SQL).fetchone()["port"])

            port = serving_again(through_the_pool)
            served = time.monotonic()
            waiting.join(timeout=60)
            new = cluster.standby(old)
            assert port == new.port
            print(f"\npromoted {promoted[0] - killed:.1f} s, pool serving {served - killed:.1f} s")
            assert served - promoted[0] < 1.0
            serving_again(lambda: store.lock_thread("t-paths", wait_s=1).release())
            assert serving_again(lambda: rt.checkpointer.get_tuple(config)) is None  # type: ignore[arg-type]
            with store.lock_pool.connection() as conn:
                assert conn.execute(PORT_SQL).fetchone()["port"] == new.port
        finally:
            store.close()
            rt.close()
    finally:
        cluster.remove()


def failovers(default: int) -> int:
    return int(os.environ.get("WRITEGATE_SOAK_FAILOVERS") or default)


def report(figures: Figures, seed: int) -> None:
    print()
    print(figures.line(seed))
    print(figures.details())


def test_writes_survive_failovers_with_nothing_lost_or_doubled(test_server_url: str) -> None:
    ops, seed = settings(40 if FULL else 6, default_seed=None if FULL else 3)
    wanted = failovers(5 if FULL else 2)
    print(f"failover soak: {ops} operations, {wanted} failovers, seed {seed}")
    figures = run_failover_soak(test_server_url, ops, wanted, seed)
    report(figures, seed)
    assert figures.problems == [], figures.line(seed)
    assert len(figures.failovers) == wanted
    assert figures.check["effects"] == figures.operations >= ops
    assert (figures.check["duplicates"], figures.check["lost"]) == (0, 0)


def test_lost_commits_are_never_paid_twice_nor_shown_wrong(test_server_url: str) -> None:
    """Asynchronous replication, the WAL sender stopped before the kill: the promoted
    standby lacks commits the old primary acknowledged. No second effect, never a 500,
    never "executed" for what was not done; an operation whose claim was lost is looked
    up by its key before anything is sent again, one nobody confirms again is looked up
    by the reconciler's check after the promotion, and one lost whole is found in the
    provider's listing and escalated to a person."""
    ops, seed = settings(40 if FULL else 5, default_seed=None if FULL else 5)
    wanted = failovers(5 if FULL else 2)
    print(f"lost-commits soak: {ops} operations, {wanted} failovers, seed {seed}")
    figures = run_failover_soak(test_server_url, ops, wanted, seed, lost=True)
    report(figures, seed)
    assert figures.problems == [], figures.line(seed)
    assert len(figures.failovers) == wanted
    assert figures.check["duplicates"] == 0
    assert figures.check["blind"] == 0, figures.gaps  # lost claims are looked up first
    assert figures.check["lost"] == 0, figures.gaps
