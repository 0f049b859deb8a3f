"""LangChain's front ends, served from a folder outside the repository, for the browser runs.

The sources are third-party and never part of this repository: `WRITEGATE_UI_DIR` names a
folder holding `agent-inbox/` (langchain-ai/agent-inbox at f38301b) and `agent-chat-ui/`
(langchain-ai/agent-chat-ui at fdc87e6), each with its packages installed
(docs/agent-inbox.md, "In a browser"). Each UI is built once (`next build`, kept in its
`.next/`) and served by `next start` in its own process group. Both load the Inter font
from Google Fonts at build time: `google_fonts_offline.cjs` answers for it with a local
face, so the build needs no network. (`next dev` is no substitute: Agent Inbox's
description view trips a development-only assertion of react-markdown and renders no
card.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.integration.http_fixtures import free_port

UI_DIR_ENV = "WRITEGATE_UI_DIR"
# The first page compiles thousands of modules: minutes on a loaded two-core machine.
READY_TIMEOUT_S = 120.0
BUILD_TIMEOUT_S = 1800.0
OFFLINE_FONTS = Path(__file__).with_name("google_fonts_offline.cjs")


@dataclass(frozen=True)
class FrontEnd:
    folder: str
    repository: str
    commit: str
    installer: str  # the command that installs its packages from its lock file
    build: tuple[str, ...]  # `next build` with the bundler whose font loader reads the mock


AGENT_INBOX = FrontEnd(
    "agent-inbox", "langchain-ai/agent-inbox", "f38301b",
    "npx yarn@1.22.22 install --frozen-lockfile --ignore-engines", ("build", "--webpack"),
)  # fmt: skip
AGENT_CHAT_UI = FrontEnd(
    "agent-chat-ui", "langchain-ai/agent-chat-ui", "fdc87e6",
    "npx pnpm@10.5.1 install --frozen-lockfile", ("build",),
)  # fmt: skip


def absent_reason(ui: FrontEnd) -> str | None:
    """Why `ui` cannot be served here, with the steps that make it servable; or None."""
    root = os.environ.get(UI_DIR_ENV, "").strip()
    folder = Path(root) / ui.folder if root else None
    if folder is not None and (folder / "node_modules" / ".bin" / "next").exists():
        return None
    where = f"{UI_DIR_ENV}={root or '<unset>'}"
    return (
        f"{ui.folder} is not installed under {UI_DIR_ENV} ({where}): the browser runs "
        f"drive third-party front ends kept outside the repository. Set {UI_DIR_ENV} to a "
        f"folder and in it: mkdir {ui.folder} && git -C <clone of github.com/{ui.repository}> "
        f"archive {ui.commit} | tar -x -C {ui.folder} && (cd {ui.folder} && {ui.installer}); "
        "see docs/agent-inbox.md"
    )


def _stop(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)  # the group we started: next and its workers
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=15)


def _next(folder: Path, args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [str(folder / "node_modules" / ".bin" / "next"), *args], cwd=folder, env=env,
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip


def _built(ui: FrontEnd, folder: Path, log: Path, env: dict[str, str]) -> None:
    """Build `ui` unless its `.next/` holds a build already (the first run takes minutes)."""
    if (folder / ".next" / "BUILD_ID").exists():
        return
    builder = _next(folder, list(ui.build), log, env)
    try:
        code = builder.wait(timeout=BUILD_TIMEOUT_S)
    finally:
        _stop(builder)
    if code != 0:
        pytest.fail(f"next build of {ui.folder} exited with {code}:\n{log.read_text()[-4000:]}")


def _ready(url: str, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"next start exited with {server.returncode}:\n{log.read_text()[-4000:]}")
        try:
            if httpx.get(url, timeout=5.0).status_code == 200:
                return
        except httpx.TransportError:
            pass  # not listening yet
        time.sleep(0.2)  # poll interval, not a wait for a state
    pytest.fail(f"next start not ready in {READY_TIMEOUT_S:.0f} s:\n{log.read_text()[-4000:]}")


@contextmanager
def served_ui(ui: FrontEnd, log: Path) -> Iterator[str]:
    """`ui` built and served by `next start` on a free port; yield its base URL."""
    reason = absent_reason(ui)
    if reason:
        pytest.skip(reason)
    folder = Path(os.environ[UI_DIR_ENV]) / ui.folder
    env = {**os.environ, "NEXT_TELEMETRY_DISABLED": "1"}
    env["NEXT_FONT_GOOGLE_MOCKED_RESPONSES"] = str(OFFLINE_FONTS)
    _built(ui, folder, log, env)
    port = free_port()
    server = _next(folder, ["start", "--port", str(port), "--hostname", "127.0.0.1"], log, env)
    try:
        base_url = f"http://127.0.0.1:{port}"
        _ready(base_url + "/", server, log)
        yield base_url
    finally:
        _stop(server)
