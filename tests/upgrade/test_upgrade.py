"""Upgrades with approvals in flight, from the real earlier releases
(`tests/upgrade/releases.py`), each built from this repository's history and run as
processes of its own.

Under the earlier release: a write left waiting at `wg.tool_node()` and one at
`wg.middleware()`, one executed, one whose outcome is unknown, one waiting for a
second approver, and an API key. Then today's code opens the same database (a new
process, as after a restart) and every question is answered: each write runs exactly
once, counted at the tools' own downstream (`upgrade_effects`, keyed by request key).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from tests.upgrade.old_release import DRIVER, Held, command, drive, release_python
from tests.upgrade.releases import PREVIOUS, PREVIOUS_RELEASE, Release
from writegate.checkpoints.schema import CORE
from writegate.demo.runtime import open_demo
from writegate.surfaces.store import setup_service
from writegate.surfaces.web import create_app

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NEW = sys.executable
TENANT = "tenant_up"
WAITING = ["waiting_tool_node", "waiting_middleware"]
EVERY = [*WAITING, "executed", "unknown", "second_approval"]


def effects(url: str) -> Counter[str]:
    """How many times the downstream applied each request key."""
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT request_key FROM upgrade_effects").fetchall()
    return Counter(r[0] for r in rows)


def keys(url: str) -> dict[str, str]:
    """Each scenario's request key."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT t.name, p.request_key FROM upgrade_threads t "
            "JOIN writegate.proposals p USING (proposal_id)"
        ).fetchall()
    return dict(rows)


def execution_status(url: str, request_key: str) -> str:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT status FROM writegate.executions WHERE request_key = %s", (request_key,)
        ).fetchone()
    assert row is not None
    return str(row[0])


def told(report: dict[str, Any], name: str) -> dict[str, Any]:
    """The last tool result the model was told in that thread."""
    results = report[name]["told"]
    assert results, report[name]
    last: dict[str, Any] = results[-1]
    return last


@pytest.mark.parametrize("release", PREVIOUS, ids=lambda r: r.commit[:7])
def test_approvals_left_waiting_by_an_earlier_release_complete_once_after_the_upgrade(
    release: Release, create_database: Callable[[], str]
) -> None:
    old = release_python(release)
    url = create_database()
    left = drive(old, url, "leave")
    assert left["release"] != "", left
    key = command(old, url, "keys", "create", "--user", "user_up", "--tenant", TENANT)
    assert key.returncode == 0, key.stderr
    api_key = key.stdout.split()[-1]
    before = effects(url)
    assert told(left, "unknown")["code"] == "outcome_unknown"
    assert left["second_approval"]["asked"][0]["awaiting"]["what"] == "second_approval"

    # Today's code, a process of its own, opens the same database and answers.
    answered = drive(NEW, url, "answer", *WAITING)
    request_keys = keys(url)
    assert before == Counter([request_keys["executed"], request_keys["unknown"]])
    for name in WAITING:
        assert told(answered, name)["status"] == "succeeded", answered[name]
    approved = command(
        NEW, url, "approve", left["second_approval"]["proposal_id"],
        "--user", "lead_up", "--tenant", TENANT, "--yes",
    )  # fmt: skip
    assert approved.returncode == 0, approved.stdout + approved.stderr
    # The second approval's thread, the reconciler, then every question answered again
    # (a replay: it runs nothing), in a process that answered none of them before.
    second = drive(NEW, url, "answer", "second_approval", "reconcile", *EVERY)
    assert told(second, "second_approval")["status"] == "succeeded", second
    assert execution_status(url, request_keys["unknown"]) == "succeeded"  # found by lookup
    assert effects(url) == Counter(request_keys.values())
    for name in EVERY:  # no replay asks again
        assert second.get(f"{name} again", second[name])["asked"] == [], name
    # The key made under the earlier release still signs its holder in.
    setup_service(url)  # as `writegate serve` does at start
    runtime = open_demo(url).runtime
    try:
        with TestClient(create_app(runtime)) as client:
            mine = client.get(
                "/v1/approvals?status=all", headers={"Authorization": f"Bearer {api_key}"}
            )
            wrong = client.get("/v1/approvals", headers={"Authorization": "Bearer wg_nope"})
    finally:
        runtime.close()
    assert mine.status_code == 200, mine.text
    shown = {a["proposal_id"] for a in mine.json()["approvals"]}
    assert left["waiting_tool_node"]["proposal_id"] in shown  # the key's user, as before
    assert wrong.status_code == 401


def test_a_rolling_release_old_and_new_processes_side_by_side(
    create_database: Callable[[], str],
) -> None:
    """The previous release's process keeps running while today's code migrates the
    database (expand-only migrations): whichever answers, each write runs once."""
    old = release_python(PREVIOUS_RELEASE)
    url = create_database()
    left = drive(old, url, "leave")
    running = Held(old, url)  # opened before the upgrade, as a replica still up
    try:
        answered = drive(NEW, url, "answer", "waiting_tool_node")  # migrates, then answers
        assert told(answered, "waiting_tool_node")["status"] == "succeeded", answered
        by_old = running.answer("waiting_middleware")
        assert by_old["release"] == left["release"]
        assert told(by_old, "waiting_middleware")["status"] == "succeeded", by_old
        approved = command(
            NEW, url, "approve", left["second_approval"]["proposal_id"],
            "--user", "lead_up", "--tenant", TENANT, "--yes",
        )  # fmt: skip
        assert approved.returncode == 0, approved.stdout + approved.stderr
        second = running.answer("second_approval", "reconcile")
        assert told(second, "second_approval")["status"] == "succeeded", second
        request_keys = keys(url)
        assert execution_status(url, request_keys["unknown"]) == "succeeded"
        # Each answered again, by the other process: nothing runs twice.
        running.answer(*EVERY)
        drive(NEW, url, "answer", *EVERY)
        assert effects(url) == Counter(request_keys.values())
    finally:
        running.close()


def known_by(python: Path | str, url: str) -> int:
    """How many core migrations a release knows, from its own `writegate db status`."""
    status = command(python, url, "db", "status")
    assert status.returncode == 0, status.stdout + status.stderr
    line = next(ln for ln in status.stdout.splitlines() if ln.startswith("writegate "))
    return int(line.split(" of ")[1].split(";")[0])


def test_the_previous_release_started_after_the_upgrade_refuses_and_changes_nothing(
    create_database: Callable[[], str],
) -> None:
    """A process of the previous release started after today's code migrated refuses at
    once, naming both releases and changing nothing: today's code added core migrations
    it does not know (0.3.0 adds the requester's paging index, and migration 10: a token and
    an execution refer to their proposal)."""
    old = release_python(PREVIOUS_RELEASE)
    url = create_database()
    left = drive(old, url, "leave")
    drive(NEW, url, "answer", "waiting_tool_node")  # today's code migrates and answers
    with psycopg.connect(url) as conn:
        versions = conn.execute("SELECT count(*) FROM writegate.migrations").fetchall()
    assert len(CORE.migrations) > known_by(old, url)
    before = effects(url)
    late = subprocess.run(
        [str(old), str(DRIVER), "answer", "waiting_middleware", *EVERY],
        env={**os.environ, "DATABASE_URL": url}, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert late.returncode != 0, late.stdout
    assert "older than the database" in late.stderr, late.stderr
    assert f"writegate {left['release']}, which has only" in late.stderr, late.stderr
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM writegate.migrations").fetchall() == versions
        recorded = conn.execute(
            "SELECT release FROM writegate.releases WHERE migrations = 'writegate'"
        ).fetchone()
    assert recorded is not None and recorded[0] != left["release"]
    assert effects(url) == before  # it ran nothing
