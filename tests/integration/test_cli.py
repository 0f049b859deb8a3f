"""The terminal entry points, on a real PostgreSQL: demo, chat, threads, db.

`writegate demo` runs through the installed console script in a subprocess, the way a
user runs it; the others run in-process through typer's CliRunner with DATABASE_URL
pointed at a fresh test database and no model key, so the scripted model answers.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row
from typer.testing import CliRunner

from tests.app_db import setup_app
from writegate.__main__ import command
from writegate.checkpoints.database import with_database
from writegate.demo.seed import reset_demo, seed_demo
from writegate.surfaces.cli.common import console

NO_MODEL = {"OPENAI_API_KEY": None, "OPENAI_BASE_URL": None, "WRITEGATE_MODEL": None}
REPLAY_CODES = ("subject_mismatch", "tenant_mismatch", "already_consumed", "invalid_decision")


@pytest.fixture(scope="module")
def cli_db(create_database: Callable[[], str]) -> str:
    url = create_database()
    setup_app(url)
    return url


@pytest.fixture
def seeded(cli_db: str) -> str:
    """The demo rows as `db seed` leaves them, before every test."""
    with psycopg.connect(cli_db, autocommit=True) as conn:
        reset_demo(conn)
        seed_demo(conn)
    return cli_db


@pytest.fixture
def invoke(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Any]]:
    app = command()
    monkeypatch.setattr(console, "width", 200)  # ids stay on one line in tables
    runner = CliRunner()

    def _invoke(url: str, args: list[str], stdin: str | None = None) -> Any:
        result = runner.invoke(app, args, input=stdin, env={"DATABASE_URL": url, **NO_MODEL})
        assert result.exception is None or isinstance(result.exception, SystemExit), result.output
        return result

    yield _invoke


def _flat(text: str) -> str:
    return " ".join(text.split())


def _one(url: str, query: str, params: tuple[Any, ...] = ()) -> dict[str, Any]:
    with psycopg.connect(url, row_factory=dict_row) as conn:
        row = conn.execute(query, params).fetchone()
    assert row is not None
    return row


def _refunds(url: str, order_id: str) -> int:
    query = "SELECT count(*) AS n FROM provider.refunds WHERE order_id = %s"
    return int(_one(url, query, (order_id,))["n"])


def _writegate() -> list[str]:
    script = Path(sys.executable).with_name("writegate")
    return [str(script)] if script.exists() else [sys.executable, "-m", "writegate"]


def test_every_subcommand_has_help(invoke: Callable[..., Any], cli_db: str) -> None:
    for args in ([], ["demo"], ["chat"], ["threads"], ["db"], ["db", "setup"], ["db", "seed"],
                 ["db", "reset"]):  # fmt: skip
        result = invoke(cli_db, [*args, "--help"])
        assert result.exit_code == 0, (args, result.output)
        assert "Usage" in result.output


def test_demo_shows_receipt_and_refused_replays_and_can_run_again(cli_db: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in NO_MODEL}
    env.update(DATABASE_URL=cli_db, COLUMNS="200")
    for _ in range(2):  # the second run starts again from ¥199.00 refundable
        done = subprocess.run(
            [*_writegate(), "demo"], env=env, capture_output=True, text=True, timeout=60
        )
        out = _flat(done.stdout)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "scripted demo model" in out
        assert "receipt" in out and "succeeded" in out
        assert "¥199.00" in out and "19900" in out
        for code in REPLAY_CODES:
            assert code in out, code
        assert "provider saw exactly 1 refund for ord_demo" in out
        assert "Traceback" not in done.stderr


def test_demo_leaves_the_walkthrough_orders_as_seeded(seeded: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in NO_MODEL}
    env.update(DATABASE_URL=seeded, COLUMNS="200")
    done = subprocess.run(
        [*_writegate(), "demo"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for order_id in ("ord_1001", "ord_1002"):
        assert _refunds(seeded, order_id) == 0, order_id
        row = _one(seeded, "SELECT refunded_minor, version FROM orders WHERE order_id = %s",
                   (order_id,))  # fmt: skip
        assert row == {"refunded_minor": 0, "version": 1}, order_id
    query = "SELECT count(*) AS n FROM provider.refunds WHERE order_id LIKE 'ord\\_demo%%'"
    assert int(_one(seeded, query)["n"]) == 2


def test_db_reset_makes_a_refunded_walkthrough_order_refundable_again(
    invoke: Callable[..., Any], seeded: str
) -> None:
    with psycopg.connect(seeded, autocommit=True) as conn:
        conn.execute("UPDATE orders SET refunded_minor = 19900, version = 2 "
                     "WHERE order_id = 'ord_1001'")  # fmt: skip
    result = invoke(seeded, ["db", "reset"])
    assert result.exit_code == 0, result.output
    row = _one(seeded, "SELECT refunded_minor, version FROM orders WHERE order_id = 'ord_1001'")
    assert row == {"refunded_minor": 0, "version": 1}


def test_db_reset_refuses_without_yes_when_another_tenant_has_rows(
    invoke: Callable[..., Any], create_database: Callable[[], str]
) -> None:
    url = create_database()
    assert invoke(url, ["db", "seed"]).exit_code == 0
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE orders SET refunded_minor = 100 WHERE order_id = 'ord_1001'")
        conn.execute("INSERT INTO orders (order_id, tenant_id, user_id, currency, payable_minor)"
                     " VALUES ('ord_acme1', 'tenant_acme', 'u1', 'USD', 700)")  # fmt: skip
    refused = invoke(url, ["db", "reset"])
    assert refused.exit_code == 2
    assert "1 row(s) that are not demo data" in _flat(refused.output)
    assert "--yes" in refused.output and "Traceback" not in refused.output
    row = _one(url, "SELECT refunded_minor FROM orders WHERE order_id = 'ord_1001'")
    assert row == {"refunded_minor": 100}  # nothing changed
    assert invoke(url, ["db", "reset", "--yes"]).exit_code == 0
    row = _one(url, "SELECT refunded_minor FROM orders WHERE order_id = 'ord_1001'")
    assert row == {"refunded_minor": 0}
    other = _one(url, "SELECT payable_minor FROM orders WHERE order_id = 'ord_acme1'")
    assert other == {"payable_minor": 700}  # the other tenant's row is untouched


@pytest.mark.parametrize("command", [["reconcile"], ["serve", "--port", "0"]])
def test_a_misplaced_policy_key_stops_the_command_with_one_line(
    cli_db: str, tmp_path: Path, command: list[str]
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(
        'version = "local-1"\n[points]\ndefault_trust = "normal"\n'
        '[[tiers]]\nname = "one_click"\nmin_score = 0\n',
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if k not in NO_MODEL}
    env.update(DATABASE_URL=cli_db, WRITEGATE_POLICY_FILE=str(policy), COLUMNS="400")
    done = subprocess.run(
        [*_writegate(), *command], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), done.stderr
    assert str(policy) in lines[0] and "[points]" in lines[0] and "default_trust" in lines[0]


def test_db_setup_twice_then_seed(invoke: Callable[..., Any], create_database: Any) -> None:
    url = create_database()
    for _ in range(2):
        assert invoke(url, ["db", "setup"]).exit_code == 0
    assert invoke(url, ["db", "seed"]).exit_code == 0
    order = _one(url, "SELECT user_id, payable_minor FROM orders WHERE order_id = 'ord_1001'")
    assert order == {"user_id": "user_42", "payable_minor": 19900}


def test_chat_leaves_an_approval_pending_then_resumes_it_by_thread(
    invoke: Callable[..., Any], seeded: str
) -> None:
    thread = f"chat-{uuid.uuid4().hex[:8]}"
    args = ["chat", "--thread", thread]
    first = invoke(seeded, args, "refund ord_1001 because it arrived broken\nyes\nlater\n")
    out = _flat(first.output)
    assert first.exit_code == 0, first.output
    assert "Approval needed: Refund order ord_1001" in out and "¥199.00" in out
    assert "'yes' is not a decision" in out and "left pending" in out
    proposal = _one(seeded, "SELECT proposal_id, status FROM writegate.proposals "
                    "WHERE thread_id = %s", (thread,))  # fmt: skip
    assert proposal["status"] == "awaiting_confirmation"
    assert _refunds(seeded, "ord_1001") == 0

    listed = _flat(invoke(seeded, ["threads", "--user", "user_42", "--tenant", "tenant_hz"]).output)
    assert thread in listed and proposal["proposal_id"] in listed
    assert thread not in _flat(invoke(seeded, ["threads", "--user", "user_7"]).output)

    # Back later: the pending approval is asked first; then "yes" is just a chat message.
    second = invoke(seeded, args, "confirm\nyes\n/quit\n")
    out = _flat(second.output)
    assert "1 approval(s) waiting for you" in out
    assert "receipt: refund_order" in out and "succeeded" in out
    assert "I only understand a few requests" in out  # the model's answer to "yes"
    assert _refunds(seeded, "ord_1001") == 1
    rows = _one(seeded, "SELECT count(*) AS n, min(status) AS s FROM writegate.proposals "
                "WHERE thread_id = %s", (thread,))  # fmt: skip
    assert rows == {"n": 1, "s": "executed"}
    listed = _flat(invoke(seeded, ["threads", "--user", "user_42"]).output)
    assert proposal["proposal_id"] not in listed


def test_chat_yes_in_the_chat_box_confirms_nothing(invoke: Callable[..., Any], seeded: str) -> None:
    thread = f"chat-{uuid.uuid4().hex[:8]}"
    result = invoke(seeded, ["chat", "--thread", thread], "yes\nconfirm\n")  # then Ctrl-D
    assert result.exit_code == 0, result.output
    assert "receipt" not in result.output
    assert _one(seeded, "SELECT count(*) AS n FROM writegate.proposals WHERE thread_id = %s",
                (thread,))["n"] == 0  # fmt: skip
    assert _refunds(seeded, "ord_1001") == 0


def test_chat_asks_each_of_several_approvals_and_edits_one(
    invoke: Callable[..., Any], seeded: str
) -> None:
    thread = f"chat-{uuid.uuid4().hex[:8]}"
    # Two refunds in one turn: decline ord_1001; edit ord_1002's amount to $10.00, confirm.
    stdin = "refund ord_1001 and ord_1002 because late\ndecline\nedit\n\nten\n1000\n\n\nconfirm\n"
    result = invoke(seeded, ["chat", "--thread", thread], stdin)
    out = _flat(result.output)
    assert result.exit_code == 0, result.output
    assert "approval 1 of 2" in out and "approval 2 of 2" in out
    assert "amount_minor (now 4500 = $45.00" in out and "takes an integer" in out
    assert "$10.00" in out and "receipt: refund_order" in out
    assert _refunds(seeded, "ord_1001") == 0
    paid = _one(seeded, "SELECT amount_minor FROM provider.refunds WHERE order_id = 'ord_1002'")
    assert paid["amount_minor"] == 1000
    statuses = _one(seeded, "SELECT array_agg(status ORDER BY status) AS s "
                    "FROM writegate.proposals WHERE thread_id = %s", (thread,))["s"]  # fmt: skip
    assert statuses == ["declined", "executed", "superseded"]


def test_chat_sends_no_text_with_control_characters(
    invoke: Callable[..., Any], seeded: str
) -> None:
    thread = f"chat-{uuid.uuid4().hex[:8]}"
    typed = "refund ord_1001 because\x1b[1A\x1b[2K\r fine\x08\nhello\n/quit\n"
    result = invoke(seeded, ["chat", "--thread", thread], typed)
    assert result.exit_code == 0, result.output
    assert "validation_failed" in result.output and "not sent" in result.output
    assert not any(c in result.output for c in ("\x1b", "\r", "\x08"))
    # Only "hello" reached the model: nothing was proposed for the hostile line.
    assert result.output.count("I only understand a few requests") == 1
    assert _one(seeded, "SELECT count(*) AS n FROM writegate.proposals WHERE thread_id = %s",
                (thread,))["n"] == 0  # fmt: skip


def _run_cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in NO_MODEL}
    env.update(DATABASE_URL=url, COLUMNS="200")
    return subprocess.run(
        [*_writegate(), *args], env=env, capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def missing_database(test_server_url: str) -> Iterator[str]:
    """A URL naming a database that does not exist yet; dropped afterwards if created."""
    name = f"writegate_missing_{uuid.uuid4().hex[:10]}"
    yield with_database(test_server_url, name)
    with psycopg.connect(test_server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(name)))  # fmt: skip


def test_db_setup_creates_a_missing_database_and_says_so(missing_database: str) -> None:
    done = _run_cli(missing_database, "db", "setup")
    assert done.returncode == 0, done.stdout + done.stderr
    name = conninfo_to_dict(missing_database)["dbname"]
    (said,) = [line for line in done.stderr.splitlines() if "created database" in line]
    assert f"created database {name!r} on " in said and "set DATABASE_URL" in said
    assert "Traceback" not in done.stderr
    with psycopg.connect(missing_database) as conn:
        assert conn.execute("SELECT to_regclass('writegate.proposals')").fetchone() == (
            "writegate.proposals",
        )


def test_a_missing_database_that_may_not_be_created_is_one_line(
    missing_database: str, test_server_url: str
) -> None:
    role = f"wg_nocreate_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(test_server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOCREATEDB").format(sql.Identifier(role)))
    try:
        url = make_conninfo(missing_database, user=role)
        for command in (["db", "setup"], ["threads"], ["chat"]):
            done = _run_cli(url, *command)
            lines = done.stderr.strip().splitlines()
            assert done.returncode == 2, (command, done.stdout + done.stderr)
            assert len(lines) == 1 and lines[0].startswith("error:"), (command, done.stderr)
            assert "createdb" in lines[0] and "DATABASE_URL" in lines[0], lines[0]
    finally:
        with psycopg.connect(test_server_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def test_an_unreachable_server_is_one_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = _run_cli(f"postgresql://nobody@127.0.0.1:{port}/writegate", "db", "setup")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(lines) == 1 and lines[0].startswith("error:"), done.stderr
    assert "DATABASE_URL" in lines[0]


def test_chat_on_a_fresh_database_seeds_the_demo_and_answers_the_readme_example(
    invoke: Callable[..., Any], create_database: Callable[[], str]
) -> None:
    url = create_database()  # not even `db setup` has run
    result = invoke(url, ["chat"], "refund ord_1001 because it arrived broken\nlater\n")
    out = _flat(result.output)
    assert result.exit_code == 0, result.output
    assert "loaded the demo data" in out
    assert "Approval needed: Refund order ord_1001" in out and "not_found" not in out


def test_chat_on_a_database_with_other_data_says_db_seed_is_needed(
    invoke: Callable[..., Any], create_database: Callable[[], str]
) -> None:
    url = create_database()
    setup_app(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO orders (order_id, tenant_id, user_id, currency, payable_minor)"
                     " VALUES ('ord_acme1', 'tenant_acme', 'u1', 'USD', 700)")  # fmt: skip
    result = invoke(url, ["chat"], "/quit\n")
    assert result.exit_code == 0, result.output
    assert "writegate db seed" in _flat(result.output)
    assert _one(url, "SELECT count(*) AS n FROM orders") == {"n": 1}  # nothing was seeded


def test_chat_edit_takes_the_amount_in_major_units_and_history_shows_the_edit(
    invoke: Callable[..., Any], seeded: str
) -> None:
    thread = f"chat-{uuid.uuid4().hex[:8]}"
    stdin = "refund ord_1002 because late\nedit\n\n$10.001\n10.00\n\n\nconfirm\n"
    result = invoke(seeded, ["chat", "--thread", thread], stdin)
    out = _flat(result.output)
    assert result.exit_code == 0, result.output
    assert "USD has 2 decimal place(s)" in out  # $10.001 is refused, not rounded
    paid = _one(seeded, "SELECT amount_minor FROM provider.refunds WHERE order_id = 'ord_1002'")
    assert paid["amount_minor"] == 1000
    again = _flat(invoke(seeded, ["chat", "--thread", thread], "/quit\n").output)
    assert "amount_minor=1000" in again and "edited" in again
    assert "amount_minor=4500" not in again


def test_piped_output_does_not_wrap_at_80_columns(seeded: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in (*NO_MODEL, "COLUMNS", "LINES")}
    env["DATABASE_URL"] = seeded
    done = subprocess.run(
        [*_writegate(), "chat"], env=env, input="refund ord_1002 because late\nlater\n",
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    for cell in (
        "Order ord_1002 (ending 1002), shipped to 1 Market St, San Francisco",
        "$45.00 goes back to the original payment method; refundable balance after",
    ):
        assert any(cell in line for line in lines), done.stdout  # one table cell, one line


def test_later_says_until_when_the_approval_waits(invoke: Callable[..., Any], seeded: str) -> None:
    thread = f"chat-{uuid.uuid4().hex[:8]}"
    result = invoke(seeded, ["chat", "--thread", thread], "refund ord_1001 because late\nlater\n")
    assert result.exit_code == 0, result.output
    row = _one(seeded, "SELECT expires_at FROM writegate.proposals WHERE thread_id = %s", (thread,))
    shown = row["expires_at"].astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert f"left pending until {shown}" in _flat(result.output)
