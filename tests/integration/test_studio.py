"""`langgraph dev` serves the graph from langgraph.json, offline, and the SDK drives it.

The server runs as its own process group on a free loopback port, in a scratch folder
that links the repo's real `langgraph.json` and `graph/` (the server resolves graph paths
against its working directory and keeps its in-memory state in `.langgraph_api/` there).
Once with the server's in-memory checkpointer, once with writegate's Postgres one opted in
through the `checkpointer` key. Each run: request a refund, read the approval interrupt,
confirm it through `command={"resume": ...}`, read the receipt, and count exactly one
refund at the provider, even after the confirm is replayed.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from langgraph_sdk import get_sync_client
from langgraph_sdk.schema import Command, Config

from writegate.checkpoints.migrate import setup_database
from writegate.tools.seed import seed_demo

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 60.0
IDENTITY = {"user_id": "user_42", "tenant_id": "tenant_hz"}
REQUEST = "Please refund ord_1001 because the item arrived broken"
COUNT_REFUNDS_SQL = "SELECT count(*) FROM provider.refunds WHERE order_id = %s"
COUNT_THREAD_CHECKPOINTS_SQL = "SELECT count(*) FROM checkpoints WHERE thread_id = %s"
POSTGRES_CHECKPOINTER = {"path": "./graph/studio.py:postgres_checkpointer"}

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_until_ready(base_url: str, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(
                f"langgraph dev exited with {server.returncode}:\n{log.read_text()[-4000:]}"
            )
        try:
            if httpx.get(f"{base_url}/ok", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass  # not listening yet
        time.sleep(0.1)  # poll interval, not a wait for a state
    pytest.fail(f"langgraph dev not ready in {READY_TIMEOUT_S:.0f} s:\n{log.read_text()[-4000:]}")


def _stop(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)  # the group we started: server and its workers
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=15)


@pytest.fixture(params=["in-memory", "postgres"])
def studio(
    request: pytest.FixtureRequest, create_database: Callable[[], str], tmp_path: Path
) -> Iterator[tuple[str, str, str]]:
    """(server URL, test database URL, checkpointer kind) of a running `langgraph dev`."""
    url = create_database()
    setup_database(url)
    with psycopg.connect(url, autocommit=True) as conn:
        seed_demo(conn)

    (tmp_path / "graph").symlink_to(REPO / "graph", target_is_directory=True)
    config = tmp_path / "langgraph.json"
    if request.param == "postgres":
        spec = json.loads((REPO / "langgraph.json").read_text())
        config.write_text(json.dumps({**spec, "checkpointer": POSTGRES_CHECKPOINTER}))
    else:
        config.symlink_to(REPO / "langgraph.json")

    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "WRITEGATE_"))}
    env |= {
        "DATABASE_URL": url,
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        "LANGGRAPH_NO_VERSION_CHECK": "true",
        "LANGSMITH_TRACING": "false",
    }
    port = _free_port()
    langgraph = Path(sys.executable).parent / "langgraph"
    command = [str(langgraph), "dev", "--no-browser", "--no-reload"]
    command += ["--host", "127.0.0.1", "--port", str(port), "--config", str(config)]
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            command, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    try:
        base_url = f"http://127.0.0.1:{port}"
        _wait_until_ready(base_url, server, log)
        yield base_url, url, request.param
    finally:
        _stop(server)


def _refunds(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(COUNT_REFUNDS_SQL, ("ord_1001",)).fetchone()
    assert row is not None
    return int(row[0])


def _receipts(state: Any) -> list[dict[str, Any]]:
    messages = state["values"]["messages"]
    tools = [m for m in messages if m["type"] == "tool" and m["name"] == "refund_order"]
    return [json.loads(m["content"]) for m in tools]


def test_studio_server_runs_a_confirmed_refund_exactly_once(
    studio: tuple[str, str, str],
) -> None:
    base_url, url, checkpointer = studio
    client = get_sync_client(url=base_url, api_key=None)
    config: Config = {"configurable": dict(IDENTITY)}  # identity from the host, per run
    thread_id = client.threads.create()["thread_id"]

    run_input: dict[str, Any] = {"messages": [{"role": "user", "content": REQUEST}]}
    client.runs.wait(thread_id, "writegate", input=run_input, config=config)
    state: Any = client.threads.get_state(thread_id)
    [pending] = state["interrupts"]
    request = pending["value"]
    preview = {f["name"]: f["display"] for f in request["preview"]["fields"]}
    assert request["type"] == "writegate.approval" and request["operation"] == "refund_order"
    assert preview["amount_minor"] == "¥199.00" and request["args"]["amount_minor"] == 19900
    [action] = request["action_requests"]
    assert action["name"] == "refund_order" and action["args"] == request["args"]
    assert _refunds(url) == 0  # proposed, not done

    confirm: Command = {"resume": {"action": "confirm", "proposal_id": request["proposal_id"]}}
    client.runs.wait(thread_id, "writegate", command=confirm, config=config)
    state = client.threads.get_state(thread_id)
    [receipt] = _receipts(state)
    assert receipt["status"] == "succeeded"
    assert receipt["args_digest"] == request["args_digest"]
    assert state["interrupts"] == [] and state["next"] == []
    assert _refunds(url) == 1

    # A replayed confirm on the finished thread: still one refund, still one receipt.
    client.runs.wait(thread_id, "writegate", command=confirm, config=config)
    assert len(_receipts(client.threads.get_state(thread_id))) == 1
    assert _refunds(url) == 1

    if checkpointer == "postgres":  # the thread's checkpoints live beside the ledgers
        with psycopg.connect(url) as conn:
            row = conn.execute(COUNT_THREAD_CHECKPOINTS_SQL, (thread_id,)).fetchone()
        assert row is not None and row[0] > 0
