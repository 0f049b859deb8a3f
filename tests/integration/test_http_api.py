"""The HTTP API in process: auth, the approval walk-through, replays, refusals, errors.

Each scenario refunds its own fresh order, and counts what reached the provider.
"""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import Any

import httpx
import psycopg
import pytest
from fastapi.testclient import TestClient
from langgraph.checkpoint.postgres import PostgresSaver

from tests.integration.http_fixtures import (
    TENANT,
    ThreadServer,
    make_key,
    new_order,
    provider_refunds,
    sse_events,
    wait_for,
)
from writegate.approval.service import Policy
from writegate.demo.provider import SimulatedProvider
from writegate.demo.runtime import open_demo
from writegate.surfaces.store.keys import create_key, revoke_key
from writegate.surfaces.web import Settings, create_app


@pytest.fixture(scope="module")
def alice(url: str) -> dict[str, str]:
    return {"Authorization": "Bearer " + make_key(url, "user_42", roles=("approver",))}


@pytest.fixture(scope="module")
def bob(url: str) -> dict[str, str]:
    return {"Authorization": "Bearer " + make_key(url, "user_7")}


def propose_refund(
    client: TestClient, who: dict[str, str], order_id: str, amount: str = "10.00"
) -> tuple[str, str]:
    """Open a thread, ask for a refund, return (thread id, proposal id)."""
    thread = client.post("/v1/threads", headers=who).json()["thread_id"]
    reply = client.post(
        f"/v1/threads/{thread}/messages",
        headers=who,
        json={"content": f"refund {amount} CNY of {order_id} because it arrived broken"},
    )
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/event-stream")
    events = sse_events(reply.text)
    kind, end = events[-1]
    assert kind == "end" and end["status"] == "awaiting_approval", events
    approvals = [data for kind, data in events if kind == "approval"]
    assert [a["proposal_id"] for a in approvals] == [p["proposal_id"] for p in end["pending"]]
    return thread, approvals[0]["proposal_id"]


def decide(
    client: TestClient, who: dict[str, str], pid: str, key: str, **body: Any
) -> tuple[int, dict[str, Any]]:
    body.setdefault("action", "confirm")
    r = client.post(
        f"/v1/approvals/{pid}/decision", headers={**who, "Idempotency-Key": key}, json=body
    )
    return r.status_code, r.json()


def assert_error(body: dict[str, Any], code: str) -> None:
    assert body["code"] == code, body
    assert {"message", "retryable", "request_id"} <= body.keys()


def test_requests_without_a_valid_key_are_refused(client: TestClient) -> None:
    for headers in ({}, {"Authorization": "Bearer wgk_not-a-key"}, {"Authorization": "Basic x"}):
        r = client.get("/v1/approvals", headers=headers)
        assert r.status_code == 401
        assert r.headers["www-authenticate"] == "Bearer"
        assert_error(r.json(), "unauthorized")


def test_a_revoked_key_opens_no_thread_says_nothing_and_decides_nothing(
    client: TestClient, url: str
) -> None:
    """Each request of an approved write checks its key in its own first transaction:
    once the key is revoked, none of them is let in, and none changes anything."""
    with psycopg.connect(url, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
        made = create_key(conn, "user_42", TENANT, [])
    who = {"Authorization": "Bearer " + made.secret}
    thread, pid = propose_refund(client, who, new_order(url))
    with psycopg.connect(url, autocommit=True) as conn:
        assert revoke_key(conn, made.key_id)
        before = _rows_of_user(conn)
    refused = [
        client.post("/v1/threads", headers=who),
        client.post(f"/v1/threads/{thread}/messages", headers=who, json={"content": "hi"}),
        client.post(
            f"/v1/approvals/{pid}/decision",
            headers={**who, "Idempotency-Key": "revoked-1"},
            json={"action": "confirm"},
        ),
    ]
    for r in refused:
        assert r.status_code == 401, r.text
        assert r.headers["www-authenticate"] == "Bearer"
        assert_error(r.json(), "unauthorized")
    with psycopg.connect(url, autocommit=True) as conn:
        assert _rows_of_user(conn) == before
        status = conn.execute(
            "SELECT status FROM writegate.proposals WHERE proposal_id = %s", (pid,)
        ).fetchone()
    assert status == ("awaiting_confirmation",)


def _rows_of_user(conn: psycopg.Connection[Any]) -> tuple[Any, ...]:
    """user_42's threads and clicks, and the thread's checkpoints: what a request let in
    would have changed."""
    return tuple(
        conn.execute(query).fetchone()
        for query in (
            "SELECT count(*) FROM writegate.http_threads WHERE user_id = 'user_42'",
            "SELECT count(*) FROM writegate.http_clicks WHERE user_id = 'user_42'",
            "SELECT count(*) FROM checkpoints",
        )
    )


def test_identity_comes_from_the_key(client: TestClient, alice: dict[str, str]) -> None:
    me = client.get("/v1/me", headers=alice).json()
    assert (me["user_id"], me["tenant_id"], me["roles"]) == ("user_42", "tenant_hz", ["approver"])


def test_a_body_naming_another_user_is_refused_and_changes_nothing(
    client: TestClient, alice: dict[str, str]
) -> None:
    thread = client.post("/v1/threads", headers=alice).json()["thread_id"]
    r = client.post(
        f"/v1/threads/{thread}/messages",
        headers=alice,
        json={"content": "list orders", "user_id": "user_7", "tenant_id": "tenant_hz"},
    )
    assert r.status_code == 422
    assert_error(r.json(), "validation_failed")
    assert client.get(f"/v1/threads/{thread}", headers=alice).json()["messages"] == []


def test_message_to_proposal_to_confirm_to_receipt(
    client: TestClient, url: str, alice: dict[str, str]
) -> None:
    order = new_order(url)
    thread, pid = propose_refund(client, alice, order)
    pending = client.get("/v1/approvals", headers=alice).json()["approvals"]
    card = next(a for a in pending if a["proposal_id"] == pid)
    shown = {f["name"]: f["display"] for f in card["fields"]}
    assert shown["amount_minor"] == "¥10.00" and card["irreversible"] is True
    assert provider_refunds(url, order) == 0  # a proposal is a request, never a fact

    status, result = decide(client, alice, pid, "click-1")
    assert status == 200, result
    assert (result["outcome"], result["replayed"], result["receipt"]["status"]) == (
        "executed",
        False,
        "succeeded",
    )
    assert result["approval"]["status"] == "executed" and result["pending"] == []
    assert any(m["role"] == "assistant" and "succeeded" in m["content"] for m in result["messages"])
    assert provider_refunds(url, order) == 1

    receipt = client.get(f"/v1/executions/{result['receipt']['execution_id']}", headers=alice)
    assert receipt.json() == result["receipt"]
    view = client.get(f"/v1/threads/{thread}", headers=alice).json()
    assert [a["status"] for a in view["approvals"]] == ["executed"] and view["pending"] == []
    assert [a["execution_id"] for a in view["approvals"]] == [result["receipt"]["execution_id"]]
    audit = client.get("/v1/audit", headers=alice, params={"proposal_id": pid}).json()["rows"]
    assert {"propose", "decide", "execute"} <= {row["event"] for row in audit}


def test_a_second_confirm_answers_with_the_first_receipt(
    client: TestClient, url: str, alice: dict[str, str]
) -> None:
    order = new_order(url)
    _, pid = propose_refund(client, alice, order)
    first = decide(client, alice, pid, "first")
    other_click = decide(client, alice, pid, "second")
    same_click = decide(client, alice, pid, "first")
    assert first[0] == other_click[0] == same_click[0] == 200
    assert first[1]["receipt"] == other_click[1]["receipt"] == same_click[1]["receipt"]
    assert other_click[1]["replayed"] and same_click[1]["replayed"]
    reused = decide(client, alice, pid, "first", action="decline")
    assert reused[0] == 409 and reused[1]["code"] == "idempotency_conflict"
    too_late = decide(client, alice, pid, "third", action="decline")
    assert too_late[0] == 409 and too_late[1]["code"] == "already_consumed"
    assert too_late[1]["state"]["status"] == "executed"
    assert provider_refunds(url, order) == 1


def test_a_later_click_reads_its_threads_checkpoint_once(
    client: TestClient, url: str, alice: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A click on an approval that already ran answers from one read of the thread's
    checkpoint: its questions, whether a run stalled, and the pending list all come
    from that one read (a storm of such clicks spends its time here)."""
    _, pid = propose_refund(client, alice, new_order(url))
    assert decide(client, alice, pid, "runs")[0] == 200
    runner = client.app.state.wg.runner  # type: ignore[attr-defined]
    reads: list[str] = []
    read_state, reading = runner.state, runner.reading

    def counted(config: Any) -> Any:
        reads.append(config["configurable"]["thread_id"])
        return read_state(config)

    def counted_reading(config: Any) -> Any:  # a read made as the lock is taken
        read = reading(config)

        def counted_read(conn: Any) -> Any:
            reads.append(config["configurable"]["thread_id"])
            return read(conn)

        return counted_read

    monkeypatch.setattr(runner, "state", counted)
    monkeypatch.setattr(runner, "reading", counted_reading)
    status, body = decide(client, alice, pid, "later")
    assert (status, body["outcome"], body["replayed"]) == (200, "executed", True)
    assert len(reads) == 1, reads


def count_checkpoint_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The thread id of every checkpoint read from now on, counted in LangGraph's saver
    (below every way the service reads one)."""
    reads: list[str] = []
    get_tuple = PostgresSaver.get_tuple

    def counted(self: PostgresSaver, config: Any) -> Any:
        reads.append(config["configurable"]["thread_id"])
        return get_tuple(self, config)

    monkeypatch.setattr(PostgresSaver, "get_tuple", counted)
    return reads


def test_a_turn_and_a_click_read_their_threads_checkpoint_once(
    client: TestClient, url: str, alice: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read made as the thread's lock is taken is the one the run starts from: the
    graph does not read the checkpoint again."""
    reads = count_checkpoint_reads(monkeypatch)
    thread, pid = propose_refund(client, alice, new_order(url))
    assert reads == [thread]
    reads.clear()
    status, body = decide(client, alice, pid, "once")
    assert (status, body["outcome"]) == (200, "executed")
    assert reads == [thread]


def test_someone_elses_proposal_and_thread_are_not_found(
    client: TestClient, url: str, alice: dict[str, str], bob: dict[str, str]
) -> None:
    order = new_order(url)
    thread, pid = propose_refund(client, alice, order)
    status, body = decide(client, bob, pid, "bob-click")
    assert status == 404 and body["code"] == "not_found"
    missing = decide(client, bob, "prop_does_not_exist", "bob-click-2")
    assert missing[0] == 404 and set(missing[1]) == set(body) - {"details"} | {"details"}
    assert client.get(f"/v1/threads/{thread}", headers=bob).status_code == 404
    assert client.get(f"/v1/approvals/{pid}", headers=bob).status_code == 404
    assert client.get(f"/v1/approvals/{pid}", headers=alice).json()["pending"] is True
    assert provider_refunds(url, order) == 0


def test_declined_stays_declined(client: TestClient, url: str, alice: dict[str, str]) -> None:
    order = new_order(url)
    thread, pid = propose_refund(client, alice, order)
    status, result = decide(client, alice, pid, "no", action="decline", reason="wrong amount")
    assert status == 200 and result["outcome"] == "declined"
    assert any("declined" in m["content"] for m in result["messages"] if m["role"] == "tool")
    status, body = decide(client, alice, pid, "yes-after-all")
    assert status == 409 and body["code"] == "declined" and body["state"]["status"] == "declined"
    assert decide(client, alice, pid, "no-again", action="decline")[1]["replayed"] is True
    assert provider_refunds(url, order) == 0
    more = client.post(f"/v1/threads/{thread}/messages", headers=alice, json={"content": "hi"})
    assert sse_events(more.text)[-1][1]["status"] == "done"


def test_edit_makes_a_new_proposal_to_decide(
    client: TestClient, url: str, alice: dict[str, str]
) -> None:
    order = new_order(url)
    _, pid = propose_refund(client, alice, order)
    bad = decide(client, alice, pid, "edit-bad", action="edit", args={"order_id": order})
    assert bad[0] == 422 and bad[1]["code"] in ("validation_failed", "clarification_needed")
    args = {"order_id": order, "amount_minor": 500, "currency": "CNY", "reason": "partial"}
    status, result = decide(client, alice, pid, "edit-1", action="edit", args=args)
    assert status == 200 and result["outcome"] == "edited", result
    successor = result["next_approval"]
    assert successor["pending"] and {f["name"]: f["value"] for f in successor["fields"]} == args
    assert result["approval"]["status"] == "superseded"
    old = decide(client, alice, pid, "confirm-old")
    assert old[0] == 409 and old[1]["code"] == "proposal_superseded"
    status, done = decide(client, alice, successor["proposal_id"], "confirm-new")
    assert status == 200 and done["receipt"]["result"]["amount_minor"] == 500
    assert provider_refunds(url, order) == 1


def test_a_thread_with_a_pending_approval_takes_no_new_message(
    client: TestClient, url: str, alice: dict[str, str]
) -> None:
    thread, pid = propose_refund(client, alice, new_order(url))
    r = client.post(f"/v1/threads/{thread}/messages", headers=alice, json={"content": "hello"})
    assert r.status_code == 409 and r.json()["code"] == "approval_pending"
    assert r.json()["details"]["proposal_ids"] == [pid]


def test_an_expired_approval_is_gone(url: str, alice: dict[str, str]) -> None:
    runtime = open_demo(url, setup=False, policy=Policy(proposal_ttl=timedelta(seconds=1))).runtime
    try:
        with TestClient(create_app(runtime)) as client:
            order = new_order(url)
            thread, pid = propose_refund(client, alice, order)
            with psycopg.connect(url, autocommit=True) as conn:  # now() per statement
                query = "SELECT now() >= expires_at FROM writegate.proposals WHERE proposal_id = %s"
                wait_for(lambda: conn.execute(query, (pid,)).fetchone()[0], what="expiry")
            pending = client.get("/v1/approvals", headers=alice).json()["approvals"]
            assert pid not in [a["proposal_id"] for a in pending]
            status, body = decide(client, alice, pid, "late")
            assert status == 410 and body["code"] == "proposal_expired"
            assert body["state"]["status"] == "expired"
            assert provider_refunds(url, order) == 0
            more = client.post(
                f"/v1/threads/{thread}/messages", headers=alice, json={"content": "hi"}
            )
            assert more.status_code == 200 and sse_events(more.text)[-1][1]["status"] == "done"
    finally:
        runtime.close()


def test_a_turn_that_first_closes_an_expired_question_reads_again_for_its_message(
    url: str, alice: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checkpoint read as the lock is taken starts the turn's first run only (here
    the one that closes the expired question); the message's run reads what that one
    wrote, and the thread goes on from there."""
    runtime = open_demo(url, setup=False, policy=Policy(proposal_ttl=timedelta(seconds=1))).runtime
    try:
        with TestClient(create_app(runtime)) as client:
            thread, pid = propose_refund(client, alice, new_order(url))
            with psycopg.connect(url, autocommit=True) as conn:  # now() per statement
                query = "SELECT now() >= expires_at FROM writegate.proposals WHERE proposal_id = %s"
                wait_for(lambda: conn.execute(query, (pid,)).fetchone()[0], what="expiry")
            reads = count_checkpoint_reads(monkeypatch)
            more = client.post(
                f"/v1/threads/{thread}/messages", headers=alice, json={"content": "hi"}
            )
            monkeypatch.undo()
            assert more.status_code == 200 and sse_events(more.text)[-1][1]["status"] == "done"
            assert reads == [thread, thread]
            page = client.get(f"/v1/threads/{thread}", headers=alice).json()
            contents = [m["content"] for m in page["messages"]]
            assert contents[-2] == "hi" and any("expired" in c for c in contents[:-2]), contents
            (approval,) = page["approvals"]
            assert (approval["proposal_id"], approval["status"]) == (pid, "expired")
    finally:
        runtime.close()


def test_bad_input_gets_the_error_shape_never_500(
    client: TestClient, alice: dict[str, str]
) -> None:
    cases = [
        client.post("/v1/approvals/p/decision", headers=alice, json={"action": "confirm"}),
        client.post(
            "/v1/approvals/p/decision",
            headers={**alice, "Idempotency-Key": "k"},
            json={"action": "approve"},
        ),
        client.get("/v1/threads/has%20space", headers=alice),
        client.get("/v1/approvals", headers=alice, params={"limit": 0}),
        client.post("/v1/threads/th_x/messages", headers=alice, content=b"{not json"),
        client.post(
            "/v1/threads/th_x/messages",
            headers={**alice, "Content-Type": "application/json"},
            content=b"\xff",
        ),
    ]
    for r in cases:
        assert r.status_code == 422, r.text
        assert_error(r.json(), "validation_failed")
    unknown = client.get("/v1/nowhere", headers=alice)
    assert unknown.status_code == 404 and unknown.json()["code"] == "not_found"


def test_health_metrics_and_page(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok", "database": "ok"}
    metrics = client.get("/metrics")
    assert (
        'writegate_http_requests_total{method="POST",route="/v1/approvals/{proposal_id}/decision"'
        in metrics.text
    )
    page = client.get("/")
    assert page.status_code == 200 and "Approvals" in page.text
    assert client.get("/static/app.js").status_code == 200


def execution_of(url: str, proposal_id: str) -> str:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT execution_id FROM writegate.executions WHERE proposal_id = %s", (proposal_id,)
        ).fetchone()
    assert row is not None, proposal_id
    return str(row[0])


class Gate:
    """Provider faults that hold a refund inside the provider until released."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def before_refund(self, idempotency_key: str) -> None:
        self.entered.set()
        self.release.wait(timeout=30)

    def after_refund(self, idempotency_key: str, result: dict[str, Any]) -> None:
        return None

    def before_lookup(self, idempotency_key: str) -> None:
        return None


def test_a_second_click_while_the_first_executes_waits_for_it(
    url: str, alice: dict[str, str]
) -> None:
    gate = Gate()
    runtime = open_demo(url, setup=False, provider=SimulatedProvider(url, faults=gate)).runtime
    app = create_app(runtime, settings=Settings(decision_lock_wait_s=0.3))
    try:
        with ThreadServer(app) as server, httpx.Client(base_url=server.url, timeout=30) as http:
            order = new_order(url)
            thread = http.post("/v1/threads", headers=alice).json()["thread_id"]
            text = f"refund 2.00 CNY of {order} because it is scratched"
            http.post(f"/v1/threads/{thread}/messages", headers=alice, json={"content": text})
            pending = http.get("/v1/approvals", headers=alice).json()["approvals"]
            pid = next(a["proposal_id"] for a in pending if a["thread_id"] == thread)

            def click(key: str) -> httpx.Response:
                headers = {**alice, "Idempotency-Key": key}
                body = {"action": "confirm"}
                return http.post(f"/v1/approvals/{pid}/decision", headers=headers, json=body)

            first: list[httpx.Response] = []
            worker = threading.Thread(target=lambda: first.append(click("click-a")))
            worker.start()
            assert gate.entered.wait(timeout=20)  # the first click is inside the provider
            busy = click("click-b")
            assert busy.status_code == 409, busy.text
            assert (busy.json()["code"], busy.json()["retryable"]) == ("in_progress", True)
            running = http.get(f"/v1/executions/{execution_of(url, pid)}", headers=alice)
            assert running.status_code == 409, running.text  # no receipt while it runs
            assert (running.json()["code"], running.json()["retryable"]) == ("in_progress", True)
            gate.release.set()
            worker.join(timeout=30)
            again = click("click-b")  # a retryable answer was not stored: ask again
            assert first[0].status_code == again.status_code == 200, again.text
            assert again.json()["replayed"] and first[0].json()["replayed"] is False
            assert again.json()["receipt"] == first[0].json()["receipt"]
            assert provider_refunds(url, order) == 1
    finally:
        gate.release.set()
        runtime.close()


def test_a_large_refund_asks_for_the_amount_typed_again(
    client: TestClient, url: str, alice: dict[str, str]
) -> None:
    order = new_order(url, payable_minor=100_000)
    _, pid = propose_refund(client, alice, order, amount="600.00")
    card = client.get(f"/v1/approvals/{pid}", headers=alice).json()
    assert card["confirmation"]["tier"] == "retype"
    assert card["confirmation"]["retype_field"] == "amount_minor"
    for key, retyped in (("no-retype", None), ("wrong-retype", "60.00")):
        body = {"retyped": retyped} if retyped else {}
        status, refused = decide(client, alice, pid, key, **body)
        assert status == 422 and refused["code"] == "retype_mismatch", refused
        assert (
            refused["state"]["pending"] and refused["state"]["error"]["code"] == "retype_mismatch"
        )
    assert provider_refunds(url, order) == 0
    status, result = decide(client, alice, pid, "retyped", retyped="600.00")
    assert status == 200 and result["outcome"] == "executed", result
    assert provider_refunds(url, order) == 1


def test_a_very_large_refund_waits_for_a_second_approver(
    client: TestClient, url: str, alice: dict[str, str], bob: dict[str, str]
) -> None:
    carol = {"Authorization": "Bearer " + make_key(url, "user_7", roles=("approver",))}
    order = new_order(url, payable_minor=1_000_000)
    thread, pid = propose_refund(client, alice, order, amount="6000.00")
    status, first = decide(client, alice, pid, "requester", retyped="6000.00")
    assert status == 200 and first["outcome"] == "awaiting_second_approval", first
    assert (
        first["approval"]["status"] == "awaiting_second_approval" and first["approval"]["pending"]
    )
    assert provider_refunds(url, order) == 0

    own = client.post(f"/v1/reviews/{pid}", headers=alice, json={"action": "approve"})
    assert own.status_code == 403 and own.json()["code"] == "self_approval"
    assert pid not in [
        a["proposal_id"] for a in client.get("/v1/reviews", headers=alice).json()["approvals"]
    ]
    no_role = client.post(f"/v1/reviews/{pid}", headers=bob, json={"action": "approve"})
    assert no_role.status_code == 403 and no_role.json()["code"] == "forbidden"
    waiting = client.get("/v1/reviews", headers=carol).json()["approvals"]
    assert [a["requested_by"] for a in waiting if a["proposal_id"] == pid] == ["user_42"]
    approved = client.post(f"/v1/reviews/{pid}", headers=carol, json={"action": "approve"})
    assert approved.status_code == 200, approved.text
    review = approved.json()
    assert (review["approval"]["second_approver"], review["approval"]["status"]) == (
        "user_7",
        "executed",
    )
    assert review["receipt"]["status"] == "succeeded"
    assert provider_refunds(url, order) == 1  # the approval ran it

    # The requester's thread was resumed by the service: the receipt and the model's
    # answer are there without a click of theirs, and no question is left open.
    page = client.get(f"/v1/threads/{thread}", headers=alice).json()
    tools = [m for m in page["messages"] if m["role"] == "tool"]
    assert json.loads(tools[-1]["content"])["execution_id"] == review["receipt"]["execution_id"]
    assert page["messages"][-1]["role"] == "assistant"
    assert not [a for a in page["approvals"] if a["pending"]]

    status, done = decide(client, alice, pid, "requester-again")  # a late click: the receipt
    assert status == 200 and done["outcome"] == "executed", done
    assert provider_refunds(url, order) == 1


def test_a_decline_by_the_second_approver_is_told_in_the_requesters_thread(
    client: TestClient, url: str, alice: dict[str, str]
) -> None:
    carol = {"Authorization": "Bearer " + make_key(url, "user_7", roles=("approver",))}
    order = new_order(url, payable_minor=1_000_000)
    thread, pid = propose_refund(client, alice, order, amount="6000.00")
    status, _ = decide(client, alice, pid, "requester-before-decline", retyped="6000.00")
    assert status == 200
    declined = client.post(f"/v1/reviews/{pid}", headers=carol, json={"action": "decline"})
    assert declined.status_code == 200 and declined.json()["outcome"] == "declined", declined.text
    page = client.get(f"/v1/threads/{thread}", headers=alice).json()
    tools = [m for m in page["messages"] if m["role"] == "tool"]
    assert json.loads(tools[-1]["content"])["code"] == "declined"  # told, without a click
    assert not [a for a in page["approvals"] if a["pending"]]
    assert provider_refunds(url, order) == 0


def test_an_approver_revokes_an_approval_before_it_runs(
    client: TestClient, url: str, alice: dict[str, str], bob: dict[str, str]
) -> None:
    carol = {"Authorization": "Bearer " + make_key(url, "user_7", roles=("approver",))}
    order = new_order(url, payable_minor=1_000_000)
    _, pid = propose_refund(client, alice, order, amount="6000.00")
    decide(client, alice, pid, "requester", retyped="6000.00")

    no_role = client.post(f"/v1/approvals/{pid}/revoke", headers=bob)
    assert no_role.status_code == 404  # bob is neither requester nor approver: not his to see
    revoked = client.post(f"/v1/approvals/{pid}/revoke", headers=carol)
    assert revoked.status_code == 200 and revoked.json()["status"] == "revoked", revoked.text
    status, refused = decide(client, alice, pid, "after-revoke")
    assert status == 409 and refused["code"] == "revoked", refused
    late = client.post(f"/v1/reviews/{pid}", headers=carol, json={"action": "approve"})
    assert late.status_code == 409 and late.json()["code"] == "proposal_not_pending"
    assert provider_refunds(url, order) == 0


def test_a_repeated_query_parameter_is_refused(client: TestClient, alice: dict[str, str]) -> None:
    answer = client.get("/v1/audit?proposal_id=%F1%8B&proposal_id=prop_x", headers=alice)
    assert answer.status_code == 422 and answer.json()["code"] == "validation_failed"
    assert "proposal_id" in answer.json()["message"]
    assert client.get("/v1/audit?proposal_id=prop_x", headers=alice).status_code == 200


def test_an_unknown_query_parameter_is_refused_on_every_route(
    client: TestClient, url: str, alice: dict[str, str]
) -> None:
    order = new_order(url)
    thread, pid = propose_refund(client, alice, order)
    sneaky = {"user_id": "user_7"}
    for query in (sneaky, [("limit", "1"), ("limit", "2")]):
        decision = client.post(
            f"/v1/approvals/{pid}/decision",
            headers={**alice, "Idempotency-Key": "query-extra"},
            params=query,
            json={"action": "confirm"},
        )
        assert decision.status_code == 422, decision.text
        assert_error(decision.json(), "validation_failed")
    assert provider_refunds(url, order) == 0
    for path in (
        "/v1/me",
        "/v1/threads",
        f"/v1/threads/{thread}",
        "/v1/approvals",
        f"/v1/approvals/{pid}",
        "/v1/reviews",
        "/v1/audit",
        "/healthz",
    ):
        answer = client.get(path, headers=alice, params=sneaky)
        assert answer.status_code == 422, (path, answer.text)
        assert_error(answer.json(), "validation_failed")
    assert client.get(f"/v1/approvals/{pid}", headers=alice).json()["pending"] is True


def test_an_edit_that_changes_nothing_keeps_the_question(
    client: TestClient, url: str, alice: dict[str, str]
) -> None:
    order = new_order(url)
    thread, pid = propose_refund(client, alice, order)
    before = client.get(f"/v1/approvals/{pid}", headers=alice).json()
    same = {f["name"]: f["value"] for f in before["fields"]}
    status, result = decide(client, alice, pid, "edit-same", action="edit", args=same)
    assert status == 200, result
    assert result["outcome"] == "unchanged" and result["next_approval"] is None
    assert result["approval"]["pending"] and result["approval"]["status"] == before["status"]
    assert [a["proposal_id"] for a in result["pending"]] == [pid]
    history = client.get(f"/v1/threads/{thread}", headers=alice).json()["approvals"]
    assert [a["proposal_id"] for a in history] == [pid]  # no new proposal
    status, done = decide(client, alice, pid, "confirm-after-same")
    assert status == 200 and done["outcome"] == "executed", done
    assert provider_refunds(url, order) == 1
