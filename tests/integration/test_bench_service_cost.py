"""`writegate bench --writes N`: the service's cost next to the library's, end to end.

Speed is never asserted; the counts are: each path made its writes (the HTTP one with
a receipt), the service's commits and statements are at least the library's, and the
bench's databases are dropped afterwards.
"""

from __future__ import annotations

import psycopg
import pytest
from typer.testing import CliRunner

from writegate.__main__ import command
from writegate.bench.db import BenchServer
from writegate.bench.service_cost import PATHS, run_service_cost


def test_service_cost_counts_every_path_and_drops_its_databases(test_server_url: str) -> None:
    server = BenchServer(test_server_url)
    try:
        out = run_service_cost(server, writes=3, warmup=1)
    finally:
        server.drop_all()
    for path in PATHS:
        figures = out[path]
        assert figures["wall_ms"] > 0 and figures["cpu_ms"] > 0, (path, figures)
        assert figures["durable_commits"] >= 3, (path, figures)  # propose, confirm, record
        assert figures["wal_bytes"] > 0, (path, figures)
    assert out["http"]["client_cpu_ms"] > 0
    for key in ("commits", "statements", "durable_commits"):
        assert out["service"][key] >= out["library"][key], key
    with psycopg.connect(test_server_url, autocommit=True) as conn:
        left = conn.execute(
            "SELECT count(*) FROM pg_database WHERE datname LIKE %s", (server.prefix + "%",)
        ).fetchone()
    assert left == (0,)


def test_writes_option_prints_the_table(
    test_server_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", test_server_url)
    result = CliRunner().invoke(command(), ["bench", "--writes", "3"])
    assert result.exit_code == 0, result.output
    assert "HTTP/library" in result.output and "HTTP stack" in result.output
