"""The README's walkthroughs, in README order, on one database, each to a receipt.

A newcomer runs them one after the other: the demo, the terminal chat, the curl
walkthrough, the SDK snippet against `langgraph dev`, a notebook. Each must end in a
receipt (a succeeded execution and, for the demo's, its refund at the simulated
provider; the notebook refunds through a tool of its own), and none may dead-end
because of an earlier one (say, the demo using up the order the chat needs).

The snippets are read from the docs themselves (docs/first-hour.md, which gives the
order, and docs/langgraph-server.md), so the test breaks when the docs drift. They
run as written, with these substitutions: `uv run X` runs X from this environment (a
`uv` shim on PATH, so the test never syncs or locks anything), the HTTP port 8000 and
the SDK's 2024 become free ports, and the notebook runs on a copy in a scratch folder.
The database is one fresh, empty one (no `db setup`: the demo needs no configuration),
dropped at the end of the session. No model key is set, so the scripted model answers.
`writegate chat` is driven through a real pseudo-terminal.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pexpect
import psycopg
import pytest

from tests.integration.http_fixtures import free_port
from tests.integration.studio_helpers import langgraph_dev
from tests.system_packages import tools_missing

REPO = Path(__file__).resolve().parents[2]
FIRST_HOUR = REPO / "docs" / "first-hour.md"
HTTP_DOC = REPO / "docs" / "http.md"
STUDIO_DOC = REPO / "docs" / "langgraph-server.md"
ORDER = "ord_1001"
STEP_TIMEOUT_S = 120
# `uv run X ...` runs X from the environment on PATH; any other uv use is refused.
UV_SHIM = """#!/bin/sh
[ "$1" = run ] || { echo "uv shim: only 'uv run' is expected here" >&2; exit 2; }
shift
exec "$@"
"""
ANSI = r"(?:\x1b\[[0-9;]*m)*"  # rich's styles may sit between any two characters

SUCCEEDED_SQL = "SELECT count(*) FROM writegate.executions WHERE status = 'succeeded'"
RECEIPT_SQL = """
SELECT e.status, r.order_id, r.amount_minor
FROM writegate.executions e JOIN provider.refunds r ON r.provider_ref = e.provider_ref
WHERE e.provider_ref = %s
"""
REFUNDS_SQL = "SELECT count(*) FROM provider.refunds WHERE order_id LIKE %s"
EXECUTION_SQL = "SELECT status FROM writegate.executions WHERE execution_id = %s"

pytestmark = pytest.mark.slow


def _blocks(text: str, lang: str) -> list[str]:
    """The fenced code blocks of one language in a doc page, in page order."""
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.S | re.M)


def _section(path: Path, heading: str) -> str:
    """The text of one `## ` section of a doc page."""
    text = path.read_text()
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else len(text)]


def _command(line: str) -> str:
    return line.split("#", 1)[0].strip()


def _query(url: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute(sql, params).fetchall()


def _succeeded(url: str) -> int:
    return int(_query(url, SUCCEEDED_SQL)[0][0])


def _refunds(url: str, order_like: str) -> int:
    return int(_query(url, REFUNDS_SQL, order_like)[0][0])


class Walk:
    """One database, one environment, the steps run one after the other."""

    def __init__(self, url: str, scratch: Path) -> None:
        self.url, self.scratch = url, scratch
        shim = scratch / "shim"
        shim.mkdir()
        (shim / "uv").write_text(UV_SHIM)
        (shim / "uv").chmod(0o755)
        bin_dir = str(Path(sys.executable).parent)
        model_and_ours = ("OPENAI_", "WRITEGATE_")
        env = {k: v for k, v in os.environ.items() if not k.startswith(model_and_ours)}
        self.env = env | {
            "DATABASE_URL": url,
            "PATH": os.pathsep.join([str(shim), bin_dir, env.get("PATH", "")]),
            "TERM": "xterm-256color",
            "LANGSMITH_TRACING": "false",
        }

    def shell(self, script: str, name: str) -> str:
        """Run a snippet with bash (errors stop it) in its own process group, then stop
        whatever it left in the background. Output goes to a file: a background server
        keeps a pipe open."""
        path = self.scratch / f"{name}.sh"
        path.write_text(script)
        log = self.scratch / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                ["bash", "-eo", "pipefail", str(path)], cwd=self.scratch, env=self.env,
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        try:
            proc.wait(timeout=STEP_TIMEOUT_S)
        finally:
            with contextlib.suppress(ProcessLookupError):  # else nothing was left running
                os.killpg(proc.pid, signal.SIGTERM)  # the snippet's background jobs
        text = log.read_text(errors="replace")
        assert proc.returncode == 0, f"{name} failed ({proc.returncode}):\n{text[-4000:]}"
        assert "Traceback" not in text, text[-4000:]
        return text

    def chat(self, command: str, message: str) -> str:
        """`writegate chat` in a pseudo-terminal: ask, confirm at the prompt, quit."""
        argv = shlex.split(command)
        child = pexpect.spawn(
            argv[0], argv[1:], cwd=str(self.scratch), env=self.env, encoding="utf-8",
            timeout=STEP_TIMEOUT_S, dimensions=(50, 120),
        )  # fmt: skip
        try:
            child.expect(_styled("you ›"))
            child.sendline(message)
            child.expect(_styled("decision [confirm / decline / cancel / edit / later]: "))
            child.sendline("confirm")
            child.expect(_styled("you ›"))
            transcript = child.before
            child.sendline("/quit")
            child.expect(pexpect.EOF)
        finally:
            child.close(force=True)
        assert child.exitstatus == 0, transcript
        return re.sub(r"\x1b\[[0-9;]*m", "", transcript)

    def receipt(self, provider_ref: str, executions_before: int) -> None:
        """Exactly one new succeeded execution, and it refunded ord_1001 in full."""
        assert _query(self.url, RECEIPT_SQL, provider_ref) == [("succeeded", ORDER, 19900)]
        assert _succeeded(self.url) == executions_before + 1
        assert _refunds(self.url, ORDER) == 1


def _styled(text: str) -> re.Pattern[str]:
    return re.compile(ANSI.join(re.escape(char) for char in text))


def _last_json(text: str) -> Any:
    """The last pretty-printed JSON object in some output (it starts on a line `{`)."""
    lines = text.splitlines()
    start = max(i for i, line in enumerate(lines) if line == "{")
    value, _ = json.JSONDecoder().raw_decode("\n".join(lines[start:]))
    return value


def test_readme_walkthroughs_in_order_each_reach_a_receipt(
    create_database: Callable[[], str], tmp_path: Path
) -> None:
    order = _section(FIRST_HOUR, "The walkthroughs, in an order that never dead-ends")
    terminal, curl, notebook = _blocks(order, "sh")
    readme = (REPO / "README.md").read_text()
    assert "docs/first-hour.md" in readme
    assert readme.index("uv run writegate demo") < readme.index("uv run writegate chat")
    assert curl in _blocks(HTTP_DOC.read_text(), "sh"), (
        "the curl walkthrough differs in docs/http.md"
    )
    reason = tools_missing(("curl", "jq"), "the walkthrough")
    if reason:
        pytest.skip(reason)
    walk = Walk(create_database(), tmp_path)

    # 1. The demo, then the chat, then the reset the page asks for.
    [demo_line, chat_line, reset_line] = terminal.strip().splitlines()
    assert _command(demo_line) == "uv run writegate demo"
    out = walk.shell(_command(demo_line), "demo")
    assert "succeeded" in out and _succeeded(walk.url) == 2
    assert _refunds(walk.url, "ord\\_demo%") == 2 and _refunds(walk.url, ORDER) == 0

    [message] = re.findall(r'"([^"]+)"', chat_line.split("#", 1)[1])
    before = _succeeded(walk.url)
    transcript = walk.chat(_command(chat_line), message)
    [ref] = re.findall(r"provider_ref\s+(re_\w+)", transcript)
    assert f"provider ref {ref}" in " ".join(transcript.split())  # the model was told
    walk.receipt(ref, before)

    assert _command(reset_line) == "uv run writegate db reset"
    walk.shell(_command(reset_line), "reset")
    assert _refunds(walk.url, ORDER) == 0

    # 2. The curl walkthrough, as written, on a free port.
    assert "localhost:8000" in curl
    before = _succeeded(walk.url)
    receipt = _last_json(walk.shell(curl.replace("8000", str(free_port())), "curl"))
    assert receipt["status"] == "succeeded"
    walk.receipt(receipt["provider_ref"], before)

    # 3. The SDK snippet against `langgraph dev` with the auth config the page starts it
    # with, after the page's own setup line.
    studio_sh = _blocks(STUDIO_DOC.read_text(), "sh")
    [setup_line, server_line] = studio_sh[0].strip().splitlines()
    assert _command(server_line) == "uv run langgraph dev --no-browser"
    [auth_server_line] = studio_sh[1].strip().splitlines()
    assert _command(auth_server_line) == f"{_command(server_line)} --config langgraph.auth.json"
    walk.shell(_command(setup_line), "studio-setup")
    [snippet] = _blocks(STUDIO_DOC.read_text(), "python")
    assert 'url="http://127.0.0.1:2024"' in snippet
    studio = tmp_path / "studio"
    studio.mkdir()
    before = _succeeded(walk.url)
    with langgraph_dev(studio, walk.url, config_file="langgraph.auth.json") as base_url:
        (tmp_path / "sdk.py").write_text(snippet.replace("http://127.0.0.1:2024", base_url))
        done = subprocess.run(
            [sys.executable, str(tmp_path / "sdk.py")], cwd=tmp_path, env=walk.env,
            capture_output=True, text=True, timeout=STEP_TIMEOUT_S,
        )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    receipt = _last_json(done.stdout)
    assert receipt["status"] == "succeeded"
    walk.receipt(receipt["provider_ref"], before)

    # 4. A notebook, with the page's command, on a copy of the checkout's notebook; the
    # run goes to the page's --output, here in the scratch folder, and leaves the notebook
    # as it was. It refunds through a tool of its own: one new succeeded execution.
    [command] = [_command(line) for line in notebook.strip().splitlines()]
    [path] = [word for word in shlex.split(command) if word.endswith(".ipynb")]
    [run_to] = [
        word.split("=", 1)[1] for word in shlex.split(command) if word.startswith("--output=")
    ]
    assert run_to.startswith("/tmp/"), "the run must be written outside the checkout"
    ran = tmp_path / (Path(run_to).name + ".ipynb")
    (tmp_path / path).parent.mkdir(parents=True)
    shutil.copy(REPO / path, tmp_path / path)
    before = _succeeded(walk.url)
    walk.shell(command.replace(f"--output={run_to}", f"--output={ran.with_suffix('')}"), "notebook")
    assert (tmp_path / path).read_bytes() == (REPO / path).read_bytes()  # left unchanged
    cells = json.loads(ran.read_text())["cells"]
    printed = "".join(
        "".join(output.get("text", "")) for cell in cells for output in cell.get("outputs", [])
    )
    [execution_id] = set(re.findall(r'"execution_id": "(exec_[\w-]+)"', printed))
    assert _query(walk.url, EXECUTION_SQL, execution_id) == [("succeeded",)]
    assert _succeeded(walk.url) == before + 1
    assert _refunds(walk.url, ORDER) == 1  # as the SDK step left it
