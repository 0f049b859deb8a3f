"""Helpers for the MCP tests: real server processes and real SDK client sessions.

Servers run as subprocesses of `python -m graph.cli mcp ...` against a test database;
clients are the SDK's `ClientSession` (handshake era) or `Client` (2026 era), over
stdio or streamable HTTP. A recording write stream keeps the JSON-RPC ids the client
sent, so a test can show that a retry really travelled under a new id.
"""

from __future__ import annotations

import os
import pty
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx2
import mcp_types as types
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

REPO = Path(__file__).resolve().parents[2]
KEYS = {"key-42": ("user_42", "tenant_hz"), "key-7": ("user_7", "tenant_hz")}
KEYS_ENV = ",".join(f"{key}={user}@{tenant}" for key, (user, tenant) in KEYS.items())
COUNT_PROVIDER_REFUNDS = "SELECT count(*) AS n FROM provider.refunds WHERE order_id = %s"

Answer = Callable[[types.ElicitRequestParams], types.ElicitResult]


def accept(_: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"confirm": True})


def decline(_: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="decline")


def cancel(_: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="cancel")


class Person:
    """Stands in for the human behind the client: answers elicitations, keeps what was shown."""

    def __init__(self, answer: Answer = accept) -> None:
        self.answer = answer
        self.shown: list[str] = []

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.shown.append(params.message)
        return self.answer(params)


class RecordingWriter:
    """Wraps a client write stream and records the JSON-RPC id of every tools/call."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.call_ids: list[Any] = []

    async def send(self, item: Any, /) -> None:
        message = getattr(item, "message", None)
        if getattr(message, "method", None) == "tools/call":
            self.call_ids.append(message.id)  # type: ignore[union-attr]
        await self.inner.send(item)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> RecordingWriter:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def server_env(database_url: str, **extra: str) -> dict[str, str]:
    return {"DATABASE_URL": database_url, "PYTHONUNBUFFERED": "1", **extra}


@asynccontextmanager
async def stdio_session(
    database_url: str, user: str, tenant: str = "tenant_hz", person: Person | None = None
) -> AsyncIterator[tuple[ClientSession, RecordingWriter]]:
    """`writegate mcp` over stdio as `user`; elicitation supported only if `person` is given."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "writegate", "mcp", "--user", user, "--tenant", tenant],
        env=server_env(database_url),
        cwd=str(REPO),
    )
    with open(os.devnull, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            writer = RecordingWriter(write)
            async with ClientSession(read, writer, elicitation_callback=person) as session:
                await session.initialize()
                yield session, writer


def http_transport(url: str, key: str | None) -> Any:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    client = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120))
    return streamable_http_client(url, http_client=client)


@asynccontextmanager
async def http_session(
    url: str, key: str, person: Person | None = None
) -> AsyncIterator[tuple[ClientSession, RecordingWriter]]:
    async with http_transport(url, key) as (read, write):
        writer = RecordingWriter(write)
        async with ClientSession(read, writer, elicitation_callback=person) as session:
            await session.initialize()
            yield session, writer


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_http_server(database_url: str, port: int) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "writegate", "mcp", "--transport", "http", "--port", str(port)]
    env = {**os.environ, **server_env(database_url, WRITEGATE_MCP_KEYS=KEYS_ENV)}
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"MCP HTTP server exited with {proc.returncode}")
        try:
            urllib.request.urlopen(urllib.request.Request(url, data=b"{}"), timeout=1)
        except urllib.error.HTTPError as exc:  # 401 without a key: the server is up
            if exc.code == 401:
                return proc
        except OSError:
            pass
        time.sleep(0.05)  # poll interval while waiting for the port, not a timing assumption
    proc.kill()
    raise RuntimeError("MCP HTTP server did not come up")


def cli_confirm(
    database_url: str, proposal_id: str, user: str, answer: str, *, tty: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run `writegate confirm` the way a person does: on a terminal, typing the answer."""
    cmd = [sys.executable, "-m", "writegate", "confirm", proposal_id]
    cmd += ["--user", user, "--tenant", "tenant_hz"]
    env = {**os.environ, **server_env(database_url)}
    if not tty:
        return subprocess.run(
            cmd, cwd=REPO, env=env, input=answer + "\n", capture_output=True, text=True, timeout=60
        )
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            cmd, cwd=REPO, env=env, stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        os.write(master, (answer + "\n").encode())
        out, err = proc.communicate(timeout=60)
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    finally:
        os.close(slave)
        os.close(master)


def refunds_at_provider(conn: Any, order_id: str = "ord_1001") -> int:
    return int(conn.execute(COUNT_PROVIDER_REFUNDS, (order_id,)).fetchone()["n"])
