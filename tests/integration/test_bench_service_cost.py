"""`writegate bench --writes N`: the service's cost next to the library's, end to end.

Speed is never asserted; the counts are: each path made its writes (the HTTP one with
a receipt), the service's commits and statements are at least the library's, and the
bench's databases are dropped afterwards. The WAL figures need `pg_walinspect` on the
test server: on one without it (the embedded server) they are None, and said so.
"""

from __future__ import annotations

import psycopg
import pytest
from typer.testing import CliRunner

from writegate.__main__ import command
from writegate.bench.db import BenchServer
from writegate.bench.service_cost import NO_WALINSPECT, PATHS, run_service_cost


def test_service_cost_counts_every_path_and_drops_its_databases(test_server_url: str) -> None:
    server = BenchServer(test_server_url)
    try:
        out = run_service_cost(server, writes=3, warmup=1)
    finally:
        server.drop_all()
    walinspect = _has_walinspect(test_server_url)
    assert out["wal"] == (None if walinspect else NO_WALINSPECT)
    for path in PATHS:
        figures = out[path]
        assert figures["wall_ms"] > 0 and figures["cpu_ms"] > 0, (path, figures)
        assert figures["commits"] >= 3, (path, figures)
        if walinspect:
            assert figures["durable_commits"] >= 3, (path, figures)  # propose, confirm, record
            assert figures["wal_bytes"] > 0, (path, figures)
        else:
            assert figures["durable_commits"] is None and figures["wal_bytes"] is None
    assert out["http"]["client_cpu_ms"] > 0
    floor = out["breakdown_cpu_ms"]
    assert floor["http_floor"] > 0 and floor["allowed"] > 0, floor
    for key in ("commits", "statements", *(["durable_commits"] if walinspect else [])):
        assert out["service"][key] >= out["library"][key], key
    # What the service commits beside the library's own: the thread's row, and per run
    # the lock taken and let go, the stream's first events and the approval's view, the
    # click and the answer (docs/scaling.md). Each request checks its key in its first
    # transaction, so the approved write stays within 1.3x the library's commits.
    # Counted without the commits of a connection a pool opens mid-run (its own, and
    # its statements' first prepares), which a short run may or may not see.
    for path in ("http", "service"):
        figures, library = out[path], out["library"]
        assert figures["transactions"] <= 1.3 * library["transactions"], (path, figures)
        assert figures["transactions"] <= figures["commits"], (path, figures)
    with psycopg.connect(test_server_url, autocommit=True) as conn:
        left = conn.execute(
            "SELECT count(*) FROM pg_database WHERE datname LIKE %s", (server.prefix + "%",)
        ).fetchone()
    assert left == (0,)


def _has_walinspect(url: str) -> bool:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_available_extensions WHERE name = 'pg_walinspect'"
        ).fetchone()
    return row == (1,)


def test_writes_option_prints_the_table(
    test_server_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", test_server_url)
    result = CliRunner().invoke(command(), ["bench", "--writes", "3"])
    assert result.exit_code == 0, result.output
    assert "HTTP/library" in result.output and "HTTP stack" in result.output
    assert "HTTP floor" in result.output
    assert ("no pg_walinspect" in result.output) != _has_walinspect(test_server_url)
