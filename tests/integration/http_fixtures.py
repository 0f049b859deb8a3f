"""Helpers for the HTTP service tests: a seeded database, keys, orders, servers, SSE.

Servers run for real: uvicorn in a thread of the test process (fast, shares the
runtime) or `writegate serve` subprocesses (replicas, SIGKILL). Waiting is always
polling a condition with a deadline, never a fixed sleep.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psycopg
import uvicorn

from writegate.demo.schema import setup_demo
from writegate.demo.seed import seed_demo
from writegate.surfaces.store import setup_service
from writegate.surfaces.store.keys import create_key

ROOT = Path(__file__).resolve().parents[2]
TENANT = "tenant_hz"


def seeded_database(create_database: Callable[[], str]) -> str:
    url = create_database()
    setup_demo(url)
    setup_service(url)
    with psycopg.connect(url, autocommit=True) as conn:
        seed_demo(conn)
    return url


def make_key(url: str, user: str, tenant: str = TENANT, roles: tuple[str, ...] = ()) -> str:
    with psycopg.connect(url, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
        return create_key(conn, user, tenant, list(roles)).secret


def new_order(url: str, user: str = "user_42", payable_minor: int = 19900) -> str:
    """A fresh refundable order, so each test refunds its own."""
    order_id = "ord_t" + secrets.token_hex(4)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO orders (order_id, tenant_id, user_id, currency, payable_minor) "
            "VALUES (%s, %s, %s, 'CNY', %s)",
            (order_id, TENANT, user, payable_minor),
        )
    return order_id


def provider_refunds(url: str, order_id: str) -> int:
    """Rows in the provider's own table: how many refunds really went out."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM provider.refunds WHERE order_id = %s", (order_id,)
        ).fetchone()
    return int(row[0]) if row else 0


def sse_events(text: str) -> list[tuple[str, Any]]:
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in lines:
            events.append((lines["event"], json.loads(lines["data"])))
    return events


def wait_for(check: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ThreadServer:
    """uvicorn serving `app` from a thread of this process, on a free port."""

    def __init__(self, app: Any) -> None:
        self.port = free_port()
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ThreadServer:
        self.thread.start()
        wait_for(lambda: self.server.started, what="uvicorn to start")
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


class Replica:
    """One `writegate serve` process on its own port, against the given database."""

    def __init__(self, url: str, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        child_env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
        child_env.update({"DATABASE_URL": url, **(env or {})})
        # A file, not a pipe: a chatty child can never block on a full pipe.
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the child
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "writegate", "serve", "--port", str(self.port),
             "--log-level", "warning"],
            cwd=ROOT,
            env=child_env,
            stdout=subprocess.DEVNULL,
            stderr=self.log,
        )  # fmt: skip

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-3000:]

    def wait_ready(self, timeout: float = 60.0) -> Replica:
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"writegate serve exited: {self.output()}")
            try:
                return httpx.get(self.url + "/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(ready, timeout, what=f"replica on port {self.port}")
        return self

    def kill(self) -> None:
        """SIGKILL: no shutdown handler, no cleanup, like a crashed machine."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
