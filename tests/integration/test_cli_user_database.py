"""The commands that are not the demo's, on a user's own database: a database with its
own `orders`, `refunds` and `tickets` tables (the demo's names, other columns) and
rows in them. Each command leaves those tables byte for byte as they were (their
definitions and their rows) and creates none of the demo's tables."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from tests.integration.library_helpers import balance, pay
from writegate.__main__ import command
from writegate.surfaces.served import TOOLS_ENV, open_served
from writegate.surfaces.web.app import create_app
from writegate.surfaces.web.services import Settings

pytestmark = pytest.mark.integration

USER_TABLES = ("orders", "refunds", "tickets")
USER_SCHEMA = """
CREATE TABLE orders (id bigint PRIMARY KEY, customer text NOT NULL, total numeric(12, 2));
CREATE TABLE refunds (id bigint PRIMARY KEY, order_id bigint REFERENCES orders (id),
                      amount numeric(12, 2) NOT NULL CHECK (amount > 0));
CREATE TABLE tickets (id bigint PRIMARY KEY, subject text, opened date DEFAULT current_date);
CREATE INDEX tickets_subject_idx ON tickets (subject);
INSERT INTO orders VALUES (1, 'ada', 10.50), (2, 'grace', 99.99);
INSERT INTO refunds VALUES (7, 1, 3.25);
INSERT INTO tickets VALUES (3, 'printer on fire', '2026-01-02');
"""
# What the demo's migration list creates: none of it may appear.
DEMO_RELATIONS = (
    "public.batch_items",
    "provider.refunds",
    "public.writegate_demo_migrations",
)
# Each non-demo command, run in-process as a user types it.
COMMANDS: list[list[str]] = [
    ["db", "setup"],
    ["approvals", "--user", "lead", "--tenant", "acme"],
    ["reconcile"],
    ["escalations"],
    ["stats"],
    ["threads"],
    ["orphans"],
    ["keys", "list"],
    ["keys", "create", "--user", "lead", "--tenant", "acme"],
]

# The user's own tools, as WRITEGATE_TOOLS names them.
USER_TOOLS = [pay, balance]
USER_TOOLS_SPEC = f"{__name__}:USER_TOOLS"


def dump(url: str) -> dict[str, Any]:
    """The user's tables as they stand: columns, constraints, indexes and every row."""
    with psycopg.connect(url) as conn:
        columns = conn.execute(
            "SELECT table_name, column_name, data_type, is_nullable, column_default, "
            "numeric_precision, numeric_scale FROM information_schema.columns "
            "WHERE table_schema = 'public' AND table_name = ANY(%s) "
            "ORDER BY table_name, ordinal_position",
            (list(USER_TABLES),),
        ).fetchall()
        constraints = conn.execute(
            "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) "
            "FROM pg_constraint WHERE conrelid::regclass::text = ANY(%s) ORDER BY 1, 2",
            (list(USER_TABLES),),
        ).fetchall()
        indexes = conn.execute(
            "SELECT tablename, indexname, indexdef FROM pg_indexes "
            "WHERE schemaname = 'public' AND tablename = ANY(%s) ORDER BY 1, 2",
            (list(USER_TABLES),),
        ).fetchall()
        rows = {
            table: conn.execute(
                f"SELECT to_jsonb(t)::text FROM {table} t ORDER BY 1"  # names from a constant
            ).fetchall()
            for table in USER_TABLES
        }
    return {"columns": columns, "constraints": constraints, "indexes": indexes, "rows": rows}


def demo_relations(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        found = [
            name
            for name in DEMO_RELATIONS
            if conn.execute("SELECT to_regclass(%s)", (name,)).fetchone()[0] is not None  # type: ignore[index]
        ]
    return found


@pytest.fixture
def user_database(create_database: Callable[[], str]) -> Iterator[str]:
    url = create_database()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(USER_SCHEMA)  # type: ignore[arg-type]  # a constant script
    yield url


@pytest.fixture
def before(user_database: str) -> dict[str, Any]:
    return dump(user_database)


@pytest.mark.parametrize("args", COMMANDS, ids=lambda args: " ".join(args))
def test_a_command_leaves_the_users_own_tables_as_they_were(
    user_database: str, before: dict[str, Any], args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", user_database)
    done = CliRunner().invoke(command(), args, catch_exceptions=False)
    assert done.exit_code == 0, done.output
    assert dump(user_database) == before
    assert demo_relations(user_database) == []


def test_serve_leaves_the_users_own_tables_as_they_were(
    user_database: str, before: dict[str, Any]
) -> None:
    app = create_app(settings=Settings(database_url=user_database))
    with TestClient(app) as client:
        assert client.get("/healthz").status_code == 200
    assert dump(user_database) == before
    assert demo_relations(user_database) == []


def test_mcp_leaves_the_users_own_tables_as_they_were(
    user_database: str, before: dict[str, Any]
) -> None:
    """The stdio server opens its runtime, reads the end of its input and stops."""
    env = {**os.environ, "DATABASE_URL": user_database}
    done = subprocess.run(
        [sys.executable, "-m", "writegate", "mcp", "--user", "lead", "--tenant", "acme"],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert dump(user_database) == before
    assert demo_relations(user_database) == []


def test_the_commands_serve_the_tools_writegate_tools_names(
    user_database: str, before: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOOLS_ENV, USER_TOOLS_SPEC)
    with open_served(user_database) as runtime:
        assert [spec.name for spec in runtime.registry.specs()] == ["pay", "balance"]
    monkeypatch.setenv("DATABASE_URL", user_database)
    done = CliRunner().invoke(command(), ["reconcile"], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    assert dump(user_database) == before
    assert demo_relations(user_database) == []


def test_without_writegate_tools_a_users_database_serves_no_tool(user_database: str) -> None:
    with open_served(user_database) as runtime:
        assert runtime.registry.specs() == []


def test_a_writegate_tools_that_names_nothing_is_one_line_and_changes_nothing(
    user_database: str, before: dict[str, Any]
) -> None:
    env = {**os.environ, "DATABASE_URL": user_database, TOOLS_ENV: "no_such_module:tools"}
    done = subprocess.run(
        [sys.executable, "-m", "writegate", "approvals", "--user", "lead", "--tenant", "acme"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith(f"error: {TOOLS_ENV}='no_such_module:tools'"), done.stderr
    assert "Traceback" not in done.stderr
    assert dump(user_database) == before


def test_the_commands_one_after_another_leave_the_users_own_tables_as_they_were(
    user_database: str, before: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once writegate's own tables exist, the next command still sees a user's database."""
    monkeypatch.setenv("DATABASE_URL", user_database)
    for args in COMMANDS + COMMANDS:
        done = CliRunner().invoke(command(), args, catch_exceptions=False)
        assert done.exit_code == 0, (args, done.output)
    assert dump(user_database) == before
    assert demo_relations(user_database) == []
