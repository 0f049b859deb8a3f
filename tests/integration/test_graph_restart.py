"""A thread paused at approval survives its process: confirmed later from a new one.

The state lives in PostgreSQL (checkpoints and ledger), so a new process resumes the
same thread_id and the write runs exactly once, including after the first process
was killed with SIGKILL while it waited.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.types import Command

from tests.integration.graph_helpers import (
    config,
    confirm,
    new_id,
    new_order,
    open_graph_runtime,
    refunds_at_provider,
    start_refund,
    statuses,
    tool_content,
    tool_messages,
)
from writegate.runtime.wiring import Runtime

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CHILD = "tests.integration.graph_restart_child"
DEADLINE_S = 60.0


@pytest.fixture(scope="module")
def rt(create_database: Callable[[], str]) -> Iterator[Runtime]:
    with open_graph_runtime(create_database) as runtime:
        yield runtime


def _env(rt: Runtime) -> dict[str, str]:
    return {**os.environ, "DATABASE_URL": rt.url}


def _resume_elsewhere(rt: Runtime, thread: str, decision: dict[str, Any]) -> dict[str, Any]:
    """Resume the thread from a brand-new process and return what it reported."""
    done = subprocess.run(
        [sys.executable, "-m", CHILD, "resume", thread, json.dumps(decision)],
        cwd=ROOT,
        env=_env(rt),
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert isinstance(report, dict)
    return report


def _read_line(proc: subprocess.Popen[str], errors: Path) -> str:
    """The child's first line, waiting at most DEADLINE_S (no fixed sleep)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            line = proc.stdout.readline()
            assert line, f"child exited early: {errors.read_text()[-3000:]}"
            return line
        assert proc.poll() is None, f"child exited early: {errors.read_text()[-3000:]}"
    raise AssertionError("child did not reach its approval in time")


def test_paused_here_confirmed_from_a_new_process(rt: Runtime) -> None:
    thread, order = new_id("t"), new_order(rt)
    graph, asked = start_refund(rt, thread, order)
    pid = asked.value["proposal_id"]

    report = _resume_elsewhere(rt, thread, confirm(pid))
    assert [r["status"] for r in report["results"]] == ["succeeded"]
    assert report["pending"] == [] and report["final"] == "done"
    assert refunds_at_provider(rt, order) == 1
    assert statuses(rt, thread) == ["executed"]

    # This process sees the finished thread; resuming it here again runs nothing.
    out = graph.invoke(Command(resume=confirm(pid)), config(thread))
    assert [tool_content(m)["status"] for m in tool_messages(out)] == ["succeeded"]
    assert refunds_at_provider(rt, order) == 1


def test_killed_while_waiting_then_confirmed_from_a_new_process(
    rt: Runtime, tmp_path: Path
) -> None:
    thread, order = new_id("t"), new_order(rt)
    errors = tmp_path / "child.stderr"
    with errors.open("w") as stderr:
        waiting = subprocess.Popen(
            [sys.executable, "-m", CHILD, "start", thread, order],
            cwd=ROOT,
            env=_env(rt),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        try:
            asked = json.loads(_read_line(waiting, errors))
        finally:
            waiting.send_signal(signal.SIGKILL)
            waiting.wait(timeout=DEADLINE_S)
    assert waiting.returncode == -signal.SIGKILL
    assert asked["type"] == "writegate.approval" and asked["resource"] == f"order:{order}"
    assert statuses(rt, thread) == ["awaiting_confirmation"]
    assert refunds_at_provider(rt, order) == 0

    report = _resume_elsewhere(rt, thread, confirm(asked["proposal_id"]))
    assert [r["status"] for r in report["results"]] == ["succeeded"]
    assert report["results"][0]["result"]["amount_minor"] == 19900
    assert refunds_at_provider(rt, order) == 1
    assert statuses(rt, thread) == ["executed"]

    # A second new process replaying the same confirm changes nothing.
    again = _resume_elsewhere(rt, thread, confirm(asked["proposal_id"]))
    assert [r["status"] for r in again["results"]] == ["succeeded"]
    assert refunds_at_provider(rt, order) == 1
