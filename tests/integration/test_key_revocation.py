"""A revoked API key is refused everywhere from the first request after `keys revoke`.

Two `writegate mcp --transport http` processes and one `writegate serve` replica share
one database. Each is polled with the same key from its own thread, and every request
is stamped (monotonic clock) when it starts and ends. `writegate keys revoke` runs as
a real command between two stamps: a request that starts after the command returned
must be refused (401), on every server; one that ended before it started was accepted.
Since every request asks PostgreSQL, a lookup it cannot answer is a retryable 503.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
import psycopg
import pytest
from psycopg.rows import dict_row

from tests.integration.http_fixtures import ROOT, Replica, seeded_database, wait_for
from tests.integration.mcp_helpers import free_port, start_http_server
from writegate.approval.models import Identity
from writegate.checkpoints.pool import open_pool
from writegate.surfaces.mcp_server.identity import (
    KeyRing,
    Receive,
    Scope,
    Send,
    request_identity,
    require_bearer,
)
from writegate.surfaces.store.keys import create_key

MCP_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2025-06-18",
}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "revocation-test", "version": "1"},
    },
}
LIST_ORDERS = {
    "jsonrpc": "2.0",
    "id": 2,
    "method": "tools/call",
    "params": {"name": "list_orders", "arguments": {}},
}


@dataclass
class Poll:
    """One request: when it started and ended (monotonic) and what came back."""

    start: float
    end: float
    status: int
    accepted: bool


@dataclass
class Poller:
    """Sends one kind of request again and again until told to stop; keeps every answer."""

    name: str
    send: Callable[[], tuple[int, bool]]
    polls: list[Poll] = field(default_factory=list)
    failure: BaseException | None = None

    def run(self, stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                start = time.monotonic()
                status, accepted = self.send()
                self.polls.append(Poll(start, time.monotonic(), status, accepted))
                stop.wait(0.02)  # pacing between requests, not a timing assumption
        except BaseException as exc:  # surfaced by the test, never lost in a thread
            self.failure = exc

    def started_after(self, moment: float) -> list[Poll]:
        return [p for p in list(self.polls) if p.start > moment]


def mcp_session(client: httpx.Client, url: str) -> dict[str, str]:
    """Open an MCP session over plain HTTP; the headers its later requests carry."""
    opened = client.post(url, headers=MCP_HEADERS, json=INITIALIZE)
    assert opened.status_code == 200, opened.text
    headers = {**MCP_HEADERS, "Mcp-Session-Id": opened.headers["mcp-session-id"]}
    done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert client.post(url, headers=headers, json=done).status_code == 202
    return headers


def mcp_poll(
    client: httpx.Client, url: str, headers: dict[str, str]
) -> Callable[[], tuple[int, bool]]:
    def send() -> tuple[int, bool]:
        answer = client.post(url, headers=headers, json=LIST_ORDERS)
        return answer.status_code, answer.status_code == 200 and "ord_1001" in answer.text

    return send


def http_poll(client: httpx.Client, base: str) -> Callable[[], tuple[int, bool]]:
    def send() -> tuple[int, bool]:
        answer = client.get(f"{base}/v1/threads")
        return answer.status_code, answer.status_code == 200

    return send


@pytest.fixture(scope="module")
def url(create_database: Callable[[], str]) -> str:
    return seeded_database(create_database)


@pytest.fixture(scope="module")
def servers(url: str) -> Iterator[tuple[str, str, str]]:
    """Two MCP endpoints and one HTTP replica's base URL, all on `url`."""
    replica = Replica(url)  # starts while the MCP servers start
    mcp_procs: list[subprocess.Popen[bytes]] = []
    try:
        ports = [free_port(), free_port()]
        mcp_procs = [start_http_server(url, port) for port in ports]
        replica.wait_ready()
        yield (*(f"http://127.0.0.1:{port}/mcp" for port in ports), replica.url)  # type: ignore[misc]
    finally:
        replica.stop()
        for proc in mcp_procs:
            proc.terminate()
            proc.wait(timeout=10)


def new_key(url: str, user: str) -> tuple[str, str]:
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        made = create_key(conn, user, "tenant_hz")
    return made.secret, made.key_id


@pytest.mark.slow
def test_a_revoked_key_is_refused_by_every_server_from_the_next_request(
    url: str, servers: tuple[str, str, str]
) -> None:
    mcp_a, mcp_b, http_base = servers
    secret, key_id = new_key(url, "user_42")
    bearer = {"Authorization": f"Bearer {secret}"}
    clients = [httpx.Client(headers=bearer, timeout=30) for _ in range(3)]
    pollers = [
        Poller("mcp a", mcp_poll(clients[0], mcp_a, mcp_session(clients[0], mcp_a))),
        Poller("mcp b", mcp_poll(clients[1], mcp_b, mcp_session(clients[1], mcp_b))),
        Poller("http", http_poll(clients[2], http_base)),
    ]
    stop = threading.Event()
    threads = [threading.Thread(target=p.run, args=(stop,), daemon=True) for p in pollers]
    for thread in threads:
        thread.start()
    try:
        # Every server has accepted the key (and could have remembered it) before the revoke.
        wait_for(lambda: all(any(p.accepted for p in x.polls) for x in pollers), 20,
                 what="each server to accept the key")  # fmt: skip
        before = time.monotonic()
        revoke = subprocess.run(
            [sys.executable, "-m", "writegate", "keys", "revoke", key_id],
            cwd=ROOT,
            env={**os.environ, "DATABASE_URL": url},
            capture_output=True,
            text=True,
            timeout=60,
        )
        after = time.monotonic()
        assert revoke.returncode == 0, revoke.stderr
        assert f"key {key_id}" in revoke.stdout and "is revoked" in revoke.stdout
        # A few requests per server that started after the command returned.
        wait_for(lambda: all(len(x.started_after(after)) >= 3 for x in pollers), 10,
                 what="requests after the revoke")  # fmt: skip
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        for client in clients:
            client.close()
    for poller in pollers:
        assert poller.failure is None, f"{poller.name}: {poller.failure!r}"
        late = poller.started_after(after)
        accepted_late = [p for p in late if p.accepted]
        assert not accepted_late, (
            f"{poller.name} accepted {len(accepted_late)} of {len(late)} requests that "
            f"started after `keys revoke` returned"
        )
        assert all(p.status == 401 for p in late), [p.status for p in late]
        earlier = [p for p in poller.polls if p.end < before]
        assert earlier and all(p.accepted for p in earlier), poller.name

    # Only that key: another user's key still works on every server.
    other, _ = new_key(url, "user_7")
    with httpx.Client(headers={"Authorization": f"Bearer {other}"}, timeout=30) as client:
        for mcp in (mcp_a, mcp_b):
            answer = client.post(mcp, headers=mcp_session(client, mcp), json=LIST_ORDERS)
            assert answer.status_code == 200 and "ord_2002" in answer.text, answer.text
        assert client.get(f"{http_base}/v1/threads").status_code == 200


def test_a_key_lookup_the_database_cannot_answer_is_a_retryable_503(url: str) -> None:
    """Every request now asks PostgreSQL; when it cannot answer, the caller is told to
    retry (503, `temporarily_unavailable`), never handed a 500 or a stack trace."""
    secret, _ = new_key(url, "user_42")
    pool = open_pool(url, min_size=1, max_size=1, timeout=0.2)
    reached: list[Identity] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        reached.append(request_identity(scope))

    async def no_body() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def call() -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = []

        async def send(message: Any) -> None:
            sent.append(dict(message))

        headers = [(b"authorization", f"Bearer {secret}".encode())]
        guarded = require_bearer(app, KeyRing({}, pool))
        await guarded({"type": "http", "headers": headers}, no_body, send)
        return sent

    try:
        assert anyio.run(call) == [] and [i.user_id for i in reached] == ["user_42"]
        with pool.connection():  # the only connection is busy: the lookup cannot get one
            sent = anyio.run(call)
    finally:
        pool.close()
    assert sent[0]["status"] == 503, sent
    body = json.loads(sent[1]["body"])
    assert body["code"] == "temporarily_unavailable" and body["retryable"] is True, body
    assert len(reached) == 1  # the refused request never reached the MCP app
