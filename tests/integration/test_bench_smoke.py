"""`writegate bench --quick` runs end to end and writes every figure.

Speed is never asserted: the machine running the suite is not a benchmark machine.
The bench makes and drops its own databases on the test server.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from writegate.__main__ import command
from writegate.bench import http_storm

# Every figure the README quotes, as paths into the JSON.
FIGURES = [
    "compare.baseline.median_ms", "compare.baseline.p95_ms", "compare.writegate.median_ms",
    "compare.writegate.p95_ms", "compare.ratio.ratio_of_medians", "compare.ratio.bootstrap_ci95",
    "compare.ratio.per_pair_iqr", "compare.meets_target",
    "attribution.modes.sync.writegate.checkpointer_ms",
    "attribution.modes.async.writegate.ledger_and_domain_ms",
    "attribution.modes.exit.baseline.checkpoints_saved", "attribution.explanation",
    "ledger.round_trip.median_ms", "counts.ledger_commits_per_write",
    "counts.paths.writegate.statements_per_op", "counts.paths.baseline.round_trips_per_op",
    "counts.paths.ledger.server_and_driver_agree", "counts.meets_target",
    "storm.exactly_one_every_time", "storm.latency.median_ms", "storm.latency.p99_ms",
    "storm.cpu_per_answer.median_ms", "storm.cpu_per_round_ms",
    "storage.per_operation.bytes_per_operation.writegate.total",
    "storage.per_operation.bytes_per_operation.baseline.checkpoints",
    "storage.one_thread.no_pruning.curve", "storage.one_thread.pruned.prune_cost.median_ms",
    "scale.growth.list_pending_ms", "scale.growth.expire_us_per_row",
    "scale.growth.backlog_probe_ms", "scale.growth.without_index_probe_ms.list_pending",
    "cost.predicted_extra_ms", "cost.lines", "machine.postgres", "tracing.off_us_per_life",
    "counts.paths.ledger_token.ledger_commits_per_op",
    "profile.writegate.cpu_ms_per_op_by_package", "profile.baseline.process_cpu_ms_per_op",
]  # fmt: skip
# Part 4b, when the server extra is installed.
HTTP_STORM_FIGURES = [
    "http_storm.latency.p99_ms", "http_storm.latency.median_ms", "http_storm.answers",
]  # fmt: skip
# Part 1c, when the langchain extra is installed.
MIDDLEWARE_FIGURES = [
    "middleware.writegate_middleware.median_ms", "middleware.langchain_hitl.median_ms",
    "middleware.ratio.ratio_of_medians", "middleware.ratio.bootstrap_ci95",
    "profile.writegate_middleware.cpu_ms_per_op_by_package",
]  # fmt: skip


def figure(results: dict[str, Any], path: str) -> Any:
    value: Any = results
    for key in path.split("."):
        assert isinstance(value, dict) and key in value, f"missing figure {path}"
        value = value[key]
    return value


def target(results: dict[str, Any], starts: str) -> dict[str, Any]:
    row: dict[str, Any] = next(r for r in results["targets"] if r["figure"].startswith(starts))
    return row


def test_quick_bench_writes_every_figure_and_drops_its_databases(
    test_server_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", test_server_url)
    result = CliRunner().invoke(command(), ["bench", "--quick", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output

    results = json.loads((tmp_path / "bench-results.json").read_text(encoding="utf-8"))
    for path in FIGURES:
        assert figure(results, path) is not None, path
    assert [level["concurrency"] for level in results["ledger"]["ledger"]] == [1, 4, 16]
    assert all(level["commits_per_s"] > 0 for level in results["ledger"]["single_row_commits"])
    assert set(results["counts"]["paths"]) == {"ledger", "ledger_token", "writegate", "baseline"}
    assert len(results["compare"]["samples_ms"]["writegate"]) == results["options"]["ops"]
    assert len(results["storm"]["executions_per_round"]) == results["options"]["storm_rounds"]
    # Every write keeps ledger and audit rows, wherever writegate's schema puts them.
    stored = results["storage"]["per_operation"]["bytes_per_operation"]
    assert stored["writegate"]["ledger"] + stored["writegate"]["audit"] > 0
    assert stored["baseline"]["ledger"] + stored["baseline"]["audit"] == 0
    if http_storm.available():
        for path in HTTP_STORM_FIGURES:
            assert figure(results, path) is not None, path
        # Over two replicas, every round of clicks refunded exactly once at the provider.
        storm = results["http_storm"]
        assert storm["replicas"] == 2
        assert storm["refunds_per_round"] == [1] * results["options"]["http_rounds"]
        assert sum(storm["answers"].values()) == storm["clicks_per_round"] * storm["rounds"]
        # Every click was answered: the receipt, or busy-retry; never a failed request.
        assert {answer[:4] for answer in storm["answers"]} <= {"200 ", "409 ", "503 "}, storm
        assert target(results, "HTTP confirm storm")["value"] is not None
    assert len(results["targets"]) == 9
    assert all({"figure", "value", "target", "met"} <= set(row) for row in results["targets"])
    if importlib.util.find_spec("langchain") is not None:
        assert figure(results, "compare.langchain_hitl.median_ms") is not None
        for path in MIDDLEWARE_FIGURES:
            assert figure(results, path) is not None, path
        ops = results["options"]["ops"]
        assert [len(v) for v in results["middleware"]["samples_ms"].values()] == [ops, ops]
        assert target(results, "writegate middleware in create_agent")["value"] is not None
    if importlib.util.find_spec("matplotlib") is not None:
        assert (tmp_path / "bench-latency.png").stat().st_size > 0

    assert results["databases_kept"] == []
    with psycopg.connect(test_server_url, autocommit=True) as conn:
        left = conn.execute(
            "SELECT datname FROM pg_database WHERE starts_with(datname, %s)",
            (results["database_prefix"],),
        ).fetchall()
    assert left == []
