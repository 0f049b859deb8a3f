"""A push lost between the second approval and the requester's thread: the approval
committed (and ran the write) but the requester's thread was not resumed, so it still
holds the question. Here the approver is `writegate approve`, a process of its own that
never pushes to the HTTP service: what a service killed between the approval's commit
and the resume leaves behind. The requester's next message is not refused until the
question expires: the thread first answers the question from the ledger (the receipt,
or how it ended), then takes the message.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from fastapi.testclient import TestClient

from tests.integration.http_fixtures import make_key, new_order, provider_refunds, sse_events
from tests.integration.mcp_helpers import REPO
from tests.integration.test_http_api import decide, propose_refund


def approve_elsewhere(url: str, pid: str, *extra: str) -> None:
    """user_7 approves (or declines) in a process that does not push to the service."""
    cmd = [sys.executable, "-m", "writegate", "approve", pid, "--user", "user_7"]
    cmd += ["--tenant", "tenant_hz", "--yes", *extra]
    env = {**os.environ, "DATABASE_URL": url}
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def waiting_for_second(client: TestClient, url: str, who: dict[str, str]) -> tuple[str, str, str]:
    order = new_order(url, payable_minor=1_000_000)
    thread, pid = propose_refund(client, who, order, amount="6000.00")
    status, first = decide(client, who, pid, f"requester-{pid}", retyped="6000.00")
    assert status == 200 and first["outcome"] == "awaiting_second_approval", first
    return thread, pid, order


def next_message(client: TestClient, who: dict[str, str], thread: str) -> list[tuple[str, Any]]:
    reply = client.post(
        f"/v1/threads/{thread}/messages", headers=who, json={"content": "list orders"}
    )
    assert reply.status_code == 200, reply.text  # not 409 approval_pending
    return sse_events(reply.text)


def tool_bodies(events: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    return [
        json.loads(data["content"])
        for kind, data in events
        if kind == "message" and data["role"] == "tool" and data["content"].startswith("{")
    ]


def test_an_approval_that_was_not_pushed_resolves_on_the_requesters_next_message(
    client: TestClient, url: str
) -> None:
    alice = {"Authorization": "Bearer " + make_key(url, "user_42")}
    thread, pid, order = waiting_for_second(client, url, alice)
    approve_elsewhere(url, pid)
    assert provider_refunds(url, order) == 1  # the approval ran it

    events = next_message(client, alice, thread)
    bodies = tool_bodies(events)
    receipt = next(b for b in bodies if str(b.get("request_key")).endswith(pid))
    assert receipt["status"] == "succeeded" and receipt["execution_id"]
    kind, end = events[-1]
    assert kind == "end" and end["status"] == "done" and end["pending"] == [], events
    page = client.get(f"/v1/threads/{thread}", headers=alice).json()
    assert not [a for a in page["approvals"] if a["pending"]]
    assert page["messages"][-1]["role"] == "assistant"
    assert provider_refunds(url, order) == 1  # answering the question ran nothing more


def test_a_decline_that_was_not_pushed_is_told_on_the_requesters_next_message(
    client: TestClient, url: str
) -> None:
    alice = {"Authorization": "Bearer " + make_key(url, "user_42")}
    thread, pid, order = waiting_for_second(client, url, alice)
    approve_elsewhere(url, pid, "--decline")

    events = next_message(client, alice, thread)
    told = next(b for b in tool_bodies(events) if b.get("details", {}).get("proposal_id") == pid)
    assert told["code"] == "declined"
    assert events[-1][0] == "end" and events[-1][1]["pending"] == []
    assert provider_refunds(url, order) == 0
