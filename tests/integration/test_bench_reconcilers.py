"""The reconciler scaling bench (`bench/replicas.py --reconcilers-only`) at a tiny size.

Speed is never asserted; what is asserted is that the cloned backlog is one the
reconcilers settle by the rules (the keys the provider had `found`, the others sent
again under the same key and `retried`), each order refunded exactly once, and that the
check reports an unsettled backlog as not settled.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import psycopg

from tests.app_db import setup_app
from writegate.bench import replicas
from writegate.bench.backlog import check, make_backlog
from writegate.demo.seed import seed_demo
from writegate.surfaces.store.keys import create_key


def test_reconcilers_only_run_settles_every_cloned_outcome() -> None:
    result = replicas.run(0, 0, 24, reconciler_levels=(1, 2), reconcilers_only=True)

    assert "replicas" not in result
    assert [r["reconcilers"] for r in result["reconcilers"]] == [1, 2]
    for level in result["reconcilers"]:
        assert level["backlog"] == 24
        assert level["provider_had"] == 12
        assert level["check"] == {
            "rows": 24, "settled_correctly": 24, "not_succeeded": 0, "found": 12,
            "retried": 12, "other_actions": 0, "provider_effects": 24,
            "duplicated_effects": 0, "lost": 0, "ok": True,
        }  # fmt: skip
        assert level["settled_per_s"] > 0
        assert {"reconciler_cores", "postgres_cores", "commits_per_settled"} <= set(level)
    assert [m["reconcilers"] for m in result["reconciler_medians"]] == [1, 2]
    assert result["every_backlog_settled_correctly"] is True


def test_check_tells_an_unsettled_backlog_from_a_settled_one(
    create_database: Callable[[], str],
) -> None:
    url = create_database()
    setup_app(url)
    with psycopg.connect(url, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
        seed_demo(conn)
        key = create_key(conn, replicas.USER, replicas.TENANT).secret
    replicas.one_refund(url, key)
    backlog = make_backlog(url, 10, seen_fraction=0.3)

    before = check(url, backlog)
    assert before["ok"] is False
    assert (before["settled_correctly"], before["not_succeeded"]) == (0, 10)
    assert (before["provider_effects"], before["lost"]) == (3, 7)

    settled = subprocess.run(
        [sys.executable, "-m", "writegate", "reconcile", "--batch", "4"],
        env={**replicas.child_env(), "DATABASE_URL": url},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert settled.returncode == 0, settled.stderr

    after = check(url, backlog)
    assert after["ok"] is True
    assert (after["found"], after["retried"], after["duplicated_effects"]) == (3, 7, 0)
