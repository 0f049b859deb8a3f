"""writegate as a library on a user's own database: it creates its own tables, in a
schema of its own, and nothing else; it shares LangGraph's checkpoint tables with a
saver the user already runs; it takes another schema when told; and the library path
never loads the demo domain, its fault hooks, the surfaces or the bench."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psycopg
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.types import Command

from tests.integration.library_helpers import (
    asked,
    confirm,
    hand_built,
    last_tool,
    new_account,
    pay,
    payments,
    run_config,
    scripted,
    tool_call,
)
from writegate import Writegate

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINT_TABLES = {
    "checkpoints",
    "checkpoint_blobs",
    "checkpoint_writes",
    "checkpoint_migrations",
}
LEDGER_TABLES = {
    "proposals",
    "tokens",
    "executions",
    "audit",
    "tombstones",
    "presented",
    "timelines",
    "failover_checks",
    "failover_escalations",
    "webhook_endpoints",
    "outbox",
    "releases",
    "migrations",
}


def tables(url: str) -> dict[str, set[str]]:
    """Every table of the database by schema, system schemas aside."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT schemaname, tablename FROM pg_tables "
            "WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"
        ).fetchall()
    found: dict[str, set[str]] = {}
    for schema, table in rows:
        found.setdefault(schema, set()).add(table)
    return found


def test_open_creates_its_own_tables_in_its_schema_and_nothing_else(
    create_database: Callable[[], str],
) -> None:
    url = create_database()
    with Writegate.open(url, tools=[pay]):
        pass
    assert tables(url) == {"public": CHECKPOINT_TABLES, "writegate": LEDGER_TABLES}


USERS_OWN_SQL = """
CREATE TABLE orders (id serial PRIMARY KEY, what text NOT NULL);
CREATE TABLE audit (at timestamptz DEFAULT now(), said text);
CREATE TABLE proposals (name text);
CREATE TABLE tokens (value text);
CREATE SCHEMA provider;
INSERT INTO orders (what) VALUES ('a chair'), ('a table');
INSERT INTO audit (said) VALUES ('mine');
"""


def test_a_database_with_the_users_own_orders_and_audit_tables_opens_and_keeps_them(
    create_database: Callable[[], str],
) -> None:
    url = create_database()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(USERS_OWN_SQL, prepare=False)
    account = new_account()
    with Writegate.open(url, tools=[pay]) as wg:
        graph, config = (
            hand_built(wg, scripted([tool_call("pay", account=account, cents=5)], "ok")),
            run_config("own"),
        )
        (question,) = asked(graph.invoke({"messages": [HumanMessage("pay")]}, config))
        assert (
            last_tool(graph.invoke(Command(resume=confirm(question)), config))["status"]
            == "succeeded"
        )
    assert payments(account) == 1
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT what FROM orders ORDER BY id").fetchall() == [
            ("a chair",),
            ("a table",),
        ]
        assert conn.execute("SELECT said FROM audit").fetchall() == [("mine",)]
        assert conn.execute("SELECT count(*) FROM writegate.audit").fetchone() == (3,)
    assert tables(url)["public"] == {"orders", "audit", "proposals", "tokens", *CHECKPOINT_TABLES}


def test_langgraphs_tables_are_shared_with_a_saver_the_user_set_up_already(
    create_database: Callable[[], str],
) -> None:
    url = create_database()
    config = {"configurable": {"thread_id": "users-own", "checkpoint_ns": ""}}
    with psycopg.connect(url, autocommit=True, prepare_threshold=0) as conn:
        saver = PostgresSaver(conn)  # type: ignore[arg-type]
        saver.setup()
        checkpoint = {
            "v": 1,
            "id": "1f0a",
            "ts": "2026-12-01T00:00:00+00:00",
            "channel_values": {"x": 1},
            "channel_versions": {},
            "versions_seen": {},
        }
        saver.put(config, checkpoint, {"source": "input", "step": -1}, {})  # type: ignore[arg-type]
        before = conn.execute("SELECT v FROM checkpoint_migrations ORDER BY v").fetchall()
    with Writegate.open(url, tools=[pay]) as wg:
        found = wg.checkpointer.get_tuple(config)  # type: ignore[arg-type]
        assert found is not None and found.checkpoint["id"] == "1f0a"
    with psycopg.connect(url) as conn:
        after = conn.execute("SELECT v FROM checkpoint_migrations ORDER BY v").fetchall()
    assert after == before
    assert tables(url) == {"public": CHECKPOINT_TABLES, "writegate": LEDGER_TABLES}


def test_a_schema_of_ones_own_holds_every_row_of_a_write(
    create_database: Callable[[], str],
) -> None:
    url = create_database()
    account = new_account()
    with Writegate.open(url, tools=[pay], schema="approvals") as wg:
        graph = hand_built(wg, scripted([tool_call("pay", account=account, cents=7)], "ok", "ok"))
        config = run_config("schema")
        (question,) = asked(graph.invoke({"messages": [HumanMessage("pay")]}, config))
        receipt = last_tool(graph.invoke(Command(resume=confirm(question)), config))
        assert receipt["status"] == "succeeded"
        assert wg.reconciler().drain() == []
    assert payments(account) == 1
    assert tables(url) == {"public": CHECKPOINT_TABLES, "approvals": LEDGER_TABLES}
    with psycopg.connect(url) as conn:
        events = conn.execute(
            "SELECT event, status FROM approvals.audit ORDER BY audit_id"
        ).fetchall()
    assert events == [
        ("propose", "awaiting_confirmation"),
        ("decide", "confirmed"),
        ("execute", "succeeded"),
    ]


LIBRARY_USER = """
import sys
from writegate import Writegate, write_tool

@write_tool(side_effect="external")
def send(to: str, *, request_key: str) -> dict:
    '''Send a note.

    Args:
        to: Who to.
    '''
    return {"to": to}

APART = (
    "writegate.demo", "writegate.bench", "writegate.surfaces", "writegate.testing",
    "writegate.graph.model", "writegate.graph.scripted", "writegate.console",
)
assert not [name for name in sys.modules if name.startswith(APART)], "the import loaded them"
with Writegate.open(sys.argv[1], tools=[send]) as wg:
    wg.tool_node()
    wg.before_model()
    wg.reconciler()
loaded = sorted(
    name for name in sys.modules
    if name.startswith(APART)
)
print(",".join(loaded))
"""


def test_the_library_path_loads_no_demo_no_fault_hooks_no_surfaces_and_no_bench(
    create_database: Callable[[], str],
) -> None:
    url = create_database()
    done = subprocess.run(
        [sys.executable, "-c", LIBRARY_USER, url],
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == ""
