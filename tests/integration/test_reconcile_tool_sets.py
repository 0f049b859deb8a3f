"""Two applications, each with its own tools, share one database: a reconciler claims
only executions of the tools registered in it, and leaves the others untouched for
the process that runs them. Real processes, one per application and step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from tests.integration.fault_scripts.harness import ROOT
from writegate.surfaces.cli import ops as cli_ops

pytestmark = pytest.mark.slow

CHILD = "tests.integration.tool_set_child"
STATUS_SQL = "SELECT operation, status FROM writegate.executions ORDER BY operation"
RECONCILE_AUDIT_SQL = """
SELECT tool_name, result->>'action' AS action FROM writegate.audit
WHERE event = 'reconcile' ORDER BY audit_id"""


def run_app(url: str, effects: Path, app: str, mode: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", CHILD, app, mode, str(effects)],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": url},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def rows(url: str, sql: str) -> list[tuple[str, ...]]:
    import psycopg

    with psycopg.connect(url) as conn:
        return [tuple(row) for row in conn.execute(sql).fetchall()]


def test_a_reconciler_claims_only_executions_of_its_own_tools(
    create_database: Callable[[], str], tmp_path: Path
) -> None:
    url = create_database()
    for app in ("billing", "shipping"):
        assert run_app(url, tmp_path, app, "unknown")["code"] == "outcome_unknown"
    assert rows(url, STATUS_SQL) == [("send_invoice", "unknown"), ("ship_parcel", "unknown")]

    # The shipping application's reconciler settles its own write, and only that.
    settled = run_app(url, tmp_path, "shipping", "drain")
    assert [(s["previous_status"], s["status"], s["action"]) for s in settled] == [
        ("unknown", "succeeded", "found")
    ]
    assert rows(url, STATUS_SQL) == [("send_invoice", "unknown"), ("ship_parcel", "succeeded")]
    assert {tool for tool, _ in rows(url, RECONCILE_AUDIT_SQL)} == {"ship_parcel"}

    # `writegate reconcile` runs neither tool: it leaves the invoice and says so.
    app = typer.Typer()
    cli_ops.register(app)
    result = CliRunner().invoke(app, ["reconcile", "--json"], env={"DATABASE_URL": url})
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == []
    assert "left 1 execution of tools this process does not run: send_invoice (1)" in (
        " ".join(result.stderr.split())
    )
    assert rows(url, STATUS_SQL) == [("send_invoice", "unknown"), ("ship_parcel", "succeeded")]

    # The billing application settles its own.
    settled = run_app(url, tmp_path, "billing", "drain")
    assert [(s["status"], s["action"]) for s in settled] == [("succeeded", "found")]
    assert rows(url, STATUS_SQL) == [("send_invoice", "succeeded"), ("ship_parcel", "succeeded")]
