"""Approvals left waiting at an earlier release's HTTP service and MCP server, answered
by today's after the upgrade: the previous release (0.2.0) and the last main before it
(`tests/upgrade/releases.py` names them).

The earlier release runs as its own processes, started with its documented commands
only (`writegate db setup`, `db seed`, `keys create`, `serve`, `mcp`); the test talks
to them as any client does. Under it, a person's API key asks for a refund through the
HTTP API (the demo's model proposes it, the question waits), an MCP client asks for one
over streamable HTTP (the server asks the person, the question waits), and one over
stdio (the question waits for `writegate confirm`). Then today's server starts on the
same database, beside the old one where it serves HTTP, as in a rolling release, and
each question is answered through today's same way in. Every refund is counted at the
demo provider's own table (`provider.refunds`, one row per refund the provider made,
keyed by the request key).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import psycopg
import pytest
from mcp import Client, ClientSession, StdioServerParameters, stdio_client

from tests.integration.http_fixtures import sse_events
from tests.integration.mcp_helpers import cli_confirm, http_transport, server_env
from tests.upgrade.old_release import CACHE, NEW_PYTHON, Served, command, release_python
from tests.upgrade.releases import LAST_MAIN, PREVIOUS_RELEASE

SURFACES = [LAST_MAIN, PREVIOUS_RELEASE]

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TENANT = "tenant_hz"  # the demo's seeded tenant: user_42 owns ord_1001
REQUEST = "request_refund_order_confirmation"
EXECUTE = "execute_confirmed_refund_order"
ACCEPT: types.InputResponses = {
    "writegate_confirm": types.ElicitResult(action="accept", content={"confirm": True})
}
REFUNDS_FOR = """
SELECT count(*) FROM provider.refunds r JOIN writegate.proposals p
  ON r.idempotency_key = p.request_key WHERE p.proposal_id = %s"""


def refunds(url: str, proposal_id: str) -> int:
    """How many refunds the provider made for one proposal."""
    with psycopg.connect(url) as conn:
        row = conn.execute(REFUNDS_FOR, (proposal_id,)).fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture(params=SURFACES, ids=lambda r: r.commit[:7])
def old_database(
    request: pytest.FixtureRequest, create_database: Callable[[], str]
) -> tuple[Path, str, str]:
    """An earlier release's python, a database it set up and seeded, an API key it made."""
    old = release_python(request.param)
    url = create_database()
    for args in (("db", "setup"), ("db", "seed")):
        done = command(old, url, *args)
        assert done.returncode == 0, done.stdout + done.stderr
    key = command(old, url, "keys", "create", "--user", "user_42", "--tenant", TENANT)
    assert key.returncode == 0, key.stderr
    return old, url, key.stdout.split()[-1]


def test_a_question_left_waiting_at_an_earlier_release_http_api_runs_once(
    old_database: tuple[Path, str, str],
) -> None:
    old, url, api_key = old_database
    me = {"Authorization": f"Bearer {api_key}"}
    with Served(old, url, "serve") as before, httpx.Client(base_url=before.base) as http:
        thread = http.post("/v1/threads", headers=me).json()["thread_id"]
        asked = http.post(
            f"/v1/threads/{thread}/messages",
            headers=me,
            json={"content": "refund 10.00 CNY of ord_1001 because it arrived broken"},
            timeout=60,
        )
        kind, end = sse_events(asked.text)[-1]
        assert kind == "end" and end["status"] == "awaiting_approval", asked.text
        (pending,) = end["pending"]
        pid = pending["proposal_id"]
        assert refunds(url, pid) == 0

        # Today's service starts beside it, on the same database; the person answers there.
        with Served(NEW_PYTHON, url, "serve") as after, httpx.Client(base_url=after.base) as new:
            listed = new.get("/v1/approvals", headers=me)  # the old key, today's API
            assert listed.status_code == 200, listed.text
            assert pid in {a["proposal_id"] for a in listed.json()["approvals"]}

            def click(client: httpx.Client, key: str) -> dict[str, Any]:
                r = client.post(
                    f"/v1/approvals/{pid}/decision",
                    headers={**me, "Idempotency-Key": key},
                    json={"action": "confirm"},
                    timeout=60,
                )
                assert r.status_code == 200, r.text
                body: dict[str, Any] = r.json()
                return body

            first = click(new, "click-1")
            assert (first["outcome"], first["replayed"]) == ("executed", False), first
            assert first["receipt"]["status"] == "succeeded", first
            assert refunds(url, pid) == 1
            again = click(new, "click-1")  # the same click, retried
            other = click(new, "click-2")  # a second click
            stale = click(http, "click-3")  # a click the old replica took
            for replay in (again, other, stale):
                assert replay["replayed"] is True, replay
                assert replay["receipt"]["execution_id"] == first["receipt"]["execution_id"]
            assert refunds(url, pid) == 1


def test_a_question_left_waiting_at_an_earlier_release_mcp_http_server_runs_once(
    old_database: tuple[Path, str, str],
) -> None:
    old, url, api_key = old_database
    state_key = secrets.token_hex(16)  # the same on every replica, old and new
    args = {"order_id": "ord_1001", "amount_minor": 123, "currency": "CNY", "reason": "dented"}

    async def unanswered(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        raise AssertionError("the question is answered later, through today's server")

    async def ask(base: str) -> types.InputRequiredResult:
        # A client that can ask its person: the server hands the question back to it.
        transport = http_transport(f"{base}/mcp", api_key)
        async with Client(transport, elicitation_callback=unanswered) as c:
            asked = await c.session.call_tool(REQUEST, args, allow_input_required=True)
        assert isinstance(asked, types.InputRequiredResult), asked
        return asked

    async def answer(base: str, state: str | None) -> dict[str, Any]:
        transport = http_transport(f"{base}/mcp", api_key)
        async with Client(transport, elicitation_callback=unanswered) as c:
            done = await c.session.call_tool(
                REQUEST, args, input_responses=ACCEPT, request_state=state,
                allow_input_required=True,
            )  # fmt: skip
        assert isinstance(done, types.CallToolResult) and not done.is_error, done
        assert isinstance(done.structured_content, dict)
        return done.structured_content

    async def execute(base: str, confirmed: dict[str, Any]) -> dict[str, Any]:
        run = {k: confirmed[k] for k in ("proposal_id", "confirmation_token")}
        async with Client(http_transport(f"{base}/mcp", api_key)) as c:
            done = await c.call_tool(EXECUTE, run)
        assert not done.is_error and isinstance(done.structured_content, dict), done
        return done.structured_content

    with Served(old, url, "mcp", WRITEGATE_MCP_STATE_KEY=state_key) as before:
        asked = anyio.run(ask, before.base)  # the person is asked; nobody answers yet
        with Served(NEW_PYTHON, url, "mcp", WRITEGATE_MCP_STATE_KEY=state_key) as after:
            confirmed = anyio.run(answer, after.base, asked.request_state)
            assert confirmed["status"] == "confirmed", confirmed
            pid = confirmed["proposal_id"]
            assert refunds(url, pid) == 0
            first = anyio.run(execute, after.base, confirmed)
            assert (first.get("status"), first.get("replayed")) == ("succeeded", False), first
            assert refunds(url, pid) == 1
            again = anyio.run(execute, after.base, confirmed)  # a retry at today's
            stale = anyio.run(execute, before.base, confirmed)  # and at the old replica
            reanswered = anyio.run(answer, after.base, asked.request_state)  # the answer again
            for replay in (again, stale):
                assert replay["replayed"] is True, replay
                assert replay["execution_id"] == first["execution_id"]
            assert reanswered["proposal_id"] == pid, reanswered
            assert refunds(url, pid) == 1


def test_a_question_left_waiting_at_an_earlier_release_stdio_mcp_session_is_asked_again(
    old_database: tuple[Path, str, str],
) -> None:
    """A client that cannot ask its person, over stdio: the earlier release's server
    leaves the question waiting and names `writegate confirm`. Over stdio the session is
    the server process, so the upgrade ends it: the person's confirmation (today's
    `writegate confirm`) belongs to that ended session, and today's server refuses its
    token from the new one (`session_mismatch`, nothing runs), as it does after any
    restart. The client asks again in its new session; that question runs once, and the
    first one never runs, however often it is retried."""
    old, url, _ = old_database
    args = {"order_id": "ord_1001", "amount_minor": 145, "currency": "CNY", "reason": "torn"}

    def params(python: str) -> StdioServerParameters:
        argv = ["-m", "writegate", "mcp", "--user", "user_42", "--tenant", TENANT]
        return StdioServerParameters(command=python, args=argv, env=server_env(url), cwd=str(CACHE))

    async def session_of(python: str, steps: Callable[[ClientSession], Any]) -> Any:
        with open(os.devnull, "w") as errlog:
            async with (
                stdio_client(params(python), errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                return await steps(session)

    async def call(session: ClientSession, name: str, arguments: dict[str, Any]) -> Any:
        done = await session.call_tool(name, arguments)
        assert isinstance(done.structured_content, dict), done
        return {**done.structured_content, "is_error": done.is_error}

    def confirm(pid: str) -> dict[str, str]:
        typed = cli_confirm(url, pid, "user_42", "yes")  # the person, at a terminal
        assert typed.returncode == 0, typed.stdout + typed.stderr
        token = next(w for w in typed.stdout.split() if w.startswith("wgt_"))
        return {"proposal_id": pid, "confirmation_token": token}

    async def leave(session: ClientSession) -> Any:
        return await call(session, REQUEST, args)

    waiting = anyio.run(session_of, str(old), leave)
    assert waiting["status"] == "awaiting_confirmation", waiting
    first_token = confirm(waiting["proposal_id"])  # after the upgrade, with today's command

    async def after(session: ClientSession) -> dict[str, Any]:
        seen = {"stale": await call(session, EXECUTE, first_token)}
        seen["asked"] = asked = await call(session, REQUEST, args)
        token = confirm(asked["proposal_id"])
        seen["ran"] = await call(session, EXECUTE, token)
        seen["again"] = await call(session, EXECUTE, token)
        seen["stale again"] = await call(session, EXECUTE, first_token)
        return seen

    seen = anyio.run(session_of, NEW_PYTHON, after)
    for stale in (seen["stale"], seen["stale again"]):
        assert stale["is_error"] and stale["code"] == "session_mismatch", stale
    assert seen["asked"]["proposal_id"] != waiting["proposal_id"], seen["asked"]
    assert (seen["ran"].get("status"), seen["ran"].get("replayed")) == ("succeeded", False), seen
    assert seen["again"]["replayed"] is True, seen["again"]
    assert seen["again"]["execution_id"] == seen["ran"]["execution_id"]
    assert refunds(url, waiting["proposal_id"]) == 0
    assert refunds(url, seen["asked"]["proposal_id"]) == 1
