"""An operator's mistake is one line on stderr that says what to do next, and a non-zero
exit; never a traceback. Each runs the installed console script in a subprocess, the
way an operator does: a malformed DATABASE_URL, a database that does not exist (the
library and the commands answer alike), and a command whose extra is not installed
(made unimportable by a shim on PYTHONPATH, so the shared environment keeps it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from tests.integration.library_helpers import pay
from tests.integration.mcp_helpers import cli_confirm
from writegate import Identity, Writegate
from writegate.approval.service import new_id
from writegate.checkpoints.database import DatabaseUnavailable, with_database
from writegate.demo.runtime import open_demo
from writegate.demo.seed import seed_demo

pytestmark = pytest.mark.slow  # each case runs the console script in a process of its own
NO_MODEL = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "WRITEGATE_MODEL", "PYTHONPATH")
DATABASES_SQL = "SELECT datname FROM pg_database"


def writegate(
    *args: str, env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("writegate")
    base = {k: v for k, v in os.environ.items() if k not in NO_MODEL}
    return subprocess.run(
        [str(script), *args], env={**base, "COLUMNS": "300", **env}, capture_output=True,
        text=True, timeout=timeout, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The command failed with exactly one line on stderr, an `error:` line."""
    assert done.returncode != 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), done.stderr
    return lines[0]


def databases(server_url: str) -> set[str]:
    with psycopg.connect(server_url, autocommit=True) as conn:
        return {row[0] for row in conn.execute(DATABASES_SQL)}


# -- a malformed DATABASE_URL -----------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "command"),
    [("not-a-url", "threads"), ("mysql://app:s3cret@db:3306/shop", "demo"),
     ("host=db port=", "db setup")],
)  # fmt: skip
def test_a_malformed_database_url_is_one_line(url: str, command: str) -> None:
    line = one_line(writegate(*command.split(), env={"DATABASE_URL": url}))
    assert "DATABASE_URL" in line and "postgresql://" in line, line
    assert "s3cret" not in line  # a password in the URL is never echoed


def test_the_library_refuses_a_malformed_url_with_the_same_sentence() -> None:
    with pytest.raises(DatabaseUnavailable, match="DATABASE_URL") as refused:
        Writegate.open("mysql://app:s3cret@db:3306/shop", tools=[pay])
    assert "s3cret" not in str(refused.value)


# -- a database that does not exist -----------------------------------------------------


@pytest.fixture
def missing(test_server_url: str) -> Iterator[str]:
    """A URL naming a database that does not exist; dropped afterwards, were it made."""
    name = f"writegate_missing_{uuid.uuid4().hex[:10]}"
    yield with_database(test_server_url, name)
    with psycopg.connect(test_server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(name)))  # fmt: skip


def _says_how_to_create_it(message: str, name: str) -> None:
    assert f"database {name!r} does not exist" in message, message
    assert "writegate db setup" in message and f"createdb {name}" in message, message


def test_the_library_refuses_a_database_that_does_not_exist(
    missing: str, test_server_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = str(conninfo_to_dict(missing)["dbname"])  # also on a unix socket
    with pytest.raises(DatabaseUnavailable) as given:
        Writegate.open(missing, tools=[pay])
    _says_how_to_create_it(str(given.value), name)
    monkeypatch.setenv("DATABASE_URL", missing)
    with pytest.raises(DatabaseUnavailable) as from_env:
        Writegate.open(tools=[pay])
    assert str(from_env.value) == str(given.value)
    assert name not in databases(test_server_url)  # nothing was created


def test_the_commands_refuse_it_too_and_db_setup_creates_it(
    missing: str, test_server_url: str
) -> None:
    name = str(conninfo_to_dict(missing)["dbname"])  # also on a unix socket
    for command in (["threads"], ["demo"]):
        line = one_line(writegate(*command, env={"DATABASE_URL": missing}))
        assert line.startswith("error: "), line
        _says_how_to_create_it(line, name)
    assert name not in databases(test_server_url)
    done = writegate("db", "setup", env={"DATABASE_URL": missing})
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"created database {name!r}" in done.stderr
    with Writegate.open(missing, tools=[pay]) as wg:  # now it exists: the library opens it
        assert wg.checkpointer is not None


# -- a command whose extra is not installed ---------------------------------------------

SERVER_EXTRA = ("fastapi", "uvicorn", "prometheus_client", "sse_starlette")
MCP_EXTRA = ("mcp", "mcp_types")


@pytest.fixture
def without(tmp_path: Path) -> Any:
    """PYTHONPATH for a process in which `modules` cannot be imported, as if their
    extra were not installed: each is a package that raises ModuleNotFoundError."""

    def shim(*modules: str) -> str:
        for module in modules:
            package = tmp_path / module
            package.mkdir(exist_ok=True)
            name = repr(module)
            (package / "__init__.py").write_text(
                f"raise ModuleNotFoundError('No module named ' + {name!r}, name={name})\n"
            )
        return str(tmp_path)

    return shim


def test_serve_without_the_server_extra_is_one_line(without: Any, database_url: str) -> None:
    env = {"PYTHONPATH": without(*SERVER_EXTRA), "DATABASE_URL": database_url}
    line = one_line(writegate("serve", "--port", "0", env=env))
    assert "writegate serve" in line and "[server]" in line and "docs/install.md" in line
    assert "no module named 'uvicorn'" in line.lower()


def test_mcp_without_the_mcp_extra_is_one_line(without: Any, database_url: str) -> None:
    env = {"PYTHONPATH": without(*MCP_EXTRA), "DATABASE_URL": database_url}
    for transport in ("stdio", "http"):
        line = one_line(writegate("mcp", "--transport", transport, env=env))
        assert "writegate mcp" in line and "[mcp]" in line and "docs/install.md" in line


def test_confirm_on_a_terminal_needs_no_mcp_extra(
    without: Any, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with psycopg.connect(database_url) as conn:
        seed_demo(conn)
    me = Identity("user_42", "tenant_hz")
    with open_demo(database_url).runtime as runtime:
        proposal = runtime.service.propose(
            me, thread_id=new_id("thread"), tool_call_id=new_id("call"),
            tool_name="create_ticket",
            raw_args={"title": "Printer on fire", "description": "Third floor."},
        )  # fmt: skip
    monkeypatch.setenv("PYTHONPATH", without(*MCP_EXTRA))
    typed = cli_confirm(database_url, proposal.proposal_id, "user_42", "yes")
    assert typed.returncode == 0, typed.stdout + typed.stderr
    assert "Printer on fire" in typed.stdout
    assert any(word.startswith("wgt_") for word in typed.stdout.split()), typed.stdout
