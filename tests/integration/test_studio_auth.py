"""`langgraph dev` with the example auth handler (`langgraph.auth.json`), driven by the SDK.

One server for the module. Identity: a client authenticated by its bearer token acts
as that user only; whatever its assistant's context, its run's `configurable` or its
run's context claim (another user, another tenant, roles, trust) is refused before
anything is proposed, counted at the provider, in the proposals and in the audit.
Agent Chat UI: the UI's own edit payload with a bad amount is refused, and the card
the UI draws from `action_requests[0]` says so up front, with the old values it would
approve, in the tool's field order.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from langgraph_sdk import get_sync_client
from langgraph_sdk.client import SyncLangGraphClient

from tests.app_db import setup_app
from tests.integration.studio_helpers import langgraph_dev
from writegate.demo.seed import seed_demo

pytestmark = pytest.mark.slow

USER_42, USER_7 = "demo-user-42", "demo-user-7"  # the example handler's demo tokens
REFUND_1001 = "Please refund ord_1001 because the item arrived broken"
REFUND_2002 = "Please refund ord_2002 because the item arrived broken"
REFUND_FIELDS = ["order_id", "amount_minor", "currency", "reason"]  # refund_order's order
REFUSAL = "your_answer_was_refused"  # the card's last field after a refused answer

COUNT_PROPOSALS_SQL = "SELECT count(*) FROM writegate.proposals WHERE thread_id = ANY(%s)"
COUNT_AUDIT_SQL = "SELECT count(*) FROM writegate.audit WHERE thread_id = ANY(%s)"
SUBJECTS_SQL = "SELECT DISTINCT subject FROM writegate.proposals WHERE thread_id = %s"
AMOUNTS_SQL = "SELECT amount_minor FROM provider.refunds WHERE order_id = %s ORDER BY created_at"


@pytest.fixture(scope="module")
def served(
    create_database: Callable[[], str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """(server URL, database URL) of `langgraph dev --config langgraph.auth.json`."""
    url = create_database()
    setup_app(url)
    with psycopg.connect(url, autocommit=True) as conn:
        seed_demo(conn)
    workdir: Path = tmp_path_factory.mktemp("studio_auth")
    with langgraph_dev(workdir, url, config_file="langgraph.auth.json") as base_url:
        yield base_url, url


def _client(base_url: str, token: str | None = None, **headers: str) -> SyncLangGraphClient:
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return get_sync_client(url=base_url, api_key=None, headers=headers)


def _ui_client(base_url: str, token: str) -> SyncLangGraphClient:
    """As Agent Chat UI connects: the token in its API key setting, sent as x-api-key."""
    return get_sync_client(url=base_url, api_key=token)


def _count(url: str, sql: str, *params: Any) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(sql, params).fetchone()
    assert row is not None
    return int(row[0])


def _rows(url: str, sql: str, *params: Any) -> list[Any]:
    with psycopg.connect(url) as conn:
        return [row[0] for row in conn.execute(sql, params).fetchall()]


def _ask(client: SyncLangGraphClient, text: str, assistant: str = "writegate", **run: Any) -> Any:
    """A new thread, one run with `text`; (thread id, the run's result)."""
    thread_id = client.threads.create()["thread_id"]
    ask = {"messages": [{"role": "user", "content": text}]}
    result = client.runs.wait(thread_id, assistant, input=ask, raise_error=False, **run)
    return thread_id, result


def _refused(result: Any, error: str, *words: str) -> None:
    assert isinstance(result, dict) and "__error__" in result, result
    assert result["__error__"]["error"] == error, result
    for word in words:
        assert word in result["__error__"]["message"], result


def _pending(client: SyncLangGraphClient, thread_id: str) -> dict[str, Any]:
    [pending] = client.threads.get_state(thread_id)["interrupts"]
    value: dict[str, Any] = pending["value"]
    return value


def test_a_client_naming_another_user_or_tenant_never_acts_as_them(
    served: tuple[str, str],
) -> None:
    base_url, url = served
    user_7 = _client(base_url, USER_7)
    as_42 = {"user_id": "user_42", "tenant_id": "tenant_hz"}
    refunds_before = len(_rows(url, AMOUNTS_SQL, "ord_1001"))

    assistant = user_7.assistants.create(graph_id="writegate", context=as_42)
    routes: list[tuple[str, dict[str, Any]]] = [
        (assistant["assistant_id"], {}),
        ("writegate", {"config": {"configurable": as_42}}),
        ("writegate", {"context": as_42}),
        ("writegate", {"context": {"user_id": "user_7", "tenant_id": "tenant_other"}}),
    ]
    threads = []
    for assistant_id, run in routes:
        thread_id, result = _ask(user_7, REFUND_1001, assistant_id, **run)
        _refused(result, "IdentityConflict", "user_7")
        threads.append(thread_id)

    # Nothing proposed, nothing audited, nothing refunded: for no one, in no tenant.
    assert _count(url, COUNT_PROPOSALS_SQL, threads) == 0
    assert _count(url, COUNT_AUDIT_SQL, threads) == 0
    assert len(_rows(url, AMOUNTS_SQL, "ord_1001")) == refunds_before


def test_a_client_cannot_raise_its_own_trust_or_roles(served: tuple[str, str]) -> None:
    base_url, url = served
    user_7 = _client(base_url, USER_7)
    claims = [
        {"context": {"trust": "high"}},
        {"context": {"user_id": "user_7", "tenant_id": "tenant_hz", "trust": "high"}},
        {"config": {"configurable": {"roles": ["approver"]}}},
        {"context": {"roles": ["approver"]}},
    ]
    threads = []
    for run in claims:
        thread_id, result = _ask(user_7, REFUND_2002, **run)
        _refused(result, "IdentityConflict")
        threads.append(thread_id)
    assert _count(url, COUNT_PROPOSALS_SQL, threads) == 0
    assert _count(url, COUNT_AUDIT_SQL, threads) == 0

    # What the server says of her, said again, is accepted; she acts as herself.
    same = {"user_id": "user_7", "tenant_id": "tenant_hz", "roles": []}
    thread_id, _ = _ask(user_7, REFUND_2002, context=same)
    asked = _pending(user_7, thread_id)
    assert asked["operation"] == "refund_order" and asked["args"]["order_id"] == "ord_2002"
    assert _rows(url, SUBJECTS_SQL, thread_id) == ["user_7"]


def test_the_studio_user_has_no_tenant_and_is_refused(served: tuple[str, str]) -> None:
    base_url, url = served
    studio = _client(base_url, **{"x-auth-scheme": "langsmith"})  # no credential at all
    thread_id, result = _ask(
        studio, REFUND_1001, context={"user_id": "user_42", "tenant_id": "tenant_hz"}
    )
    _refused(result, "MissingIdentity", "tenant_id")
    assert _count(url, COUNT_PROPOSALS_SQL, [thread_id]) == 0
    assert _count(url, COUNT_AUDIT_SQL, [thread_id]) == 0

    with pytest.raises(httpx.HTTPStatusError) as refused:  # neither token nor Studio
        _client(base_url).threads.create()
    assert refused.value.response.status_code == 401


# -- Agent Chat UI: a refused edit --------------------------------------------------------


def _ui_edit(card: dict[str, Any], **changed: str) -> dict[str, Any]:
    """Agent Chat UI's answer from its edit form: the card's args, changed fields as text."""
    edited = {"name": card["name"], "args": {**card["args"], **changed}}
    return {"decisions": [{"type": "edit", "edited_action": edited}]}


def _answer(client: SyncLangGraphClient, thread_id: str, resume: Any) -> dict[str, Any]:
    client.runs.wait(thread_id, "writegate", command={"resume": resume})
    state = client.threads.get_state(thread_id)
    return state["interrupts"][0]["value"] if state["interrupts"] else {}


def _shows_refused_edit(asked: dict[str, Any], before: dict[str, Any], approve: str) -> None:
    """What the card shows up front after the UI's edit was refused."""
    [card] = asked["action_requests"]
    assert asked["error"]["code"] == "validation_failed"
    assert asked["proposal_id"] == before["proposal_id"]  # still the same proposal
    assert card["name"] == before["action_requests"][0]["name"]  # the UI matches on it
    assert asked["review_configs"][0]["action_name"] == card["name"]
    # The tool's fields, unchanged, in the tool's own order, as on the card before; the
    # refusal last, right above the card's Approve button.
    assert list(card["args"]) == [*REFUND_FIELDS, REFUSAL]
    assert {k: card["args"][k] for k in REFUND_FIELDS} == before["action_requests"][0]["args"]
    notice = card["args"][REFUSAL]
    assert "amount_minor" in notice and "validation_failed" in notice
    assert "Approve" in notice and approve in notice  # what approving now would run
    assert asked["args"] == before["args"]  # writegate's own key: the tool's args only


def test_a_refused_edit_from_agent_chat_ui_is_plain_on_the_card(served: tuple[str, str]) -> None:
    base_url, url = served
    user_42 = _ui_client(base_url, USER_42)
    thread_id, _ = _ask(user_42, REFUND_1001)
    first = _pending(user_42, thread_id)
    card = first["action_requests"][0]
    assert list(card["args"]) == REFUND_FIELDS and card["args"]["amount_minor"] == 19900
    assert _rows(url, SUBJECTS_SQL, thread_id) == ["user_42"]

    # The UI's exact payload: the card's args with the amount typed as "100.00".
    refused = _answer(user_42, thread_id, _ui_edit(card, amount_minor="100.00"))
    _shows_refused_edit(refused, first, "¥199.00")

    # Edited again on the refused card: the UI sends the refusal field back too.
    fresh = _answer(user_42, thread_id, _ui_edit(refused["action_requests"][0], amount_minor="100"))
    assert fresh["proposal_id"] != first["proposal_id"] and "error" not in fresh
    assert list(fresh["action_requests"][0]["args"]) == REFUND_FIELDS
    assert fresh["action_requests"][0]["args"]["amount_minor"] == 100

    assert _answer(user_42, thread_id, {"decisions": [{"type": "approve"}]}) == {}
    assert _rows(url, AMOUNTS_SQL, "ord_1001") == [100]

    # The example handler keeps her thread out of another user's sight.
    with pytest.raises(httpx.HTTPStatusError) as hidden:
        _client(base_url, USER_7).threads.get_state(thread_id)
    assert hidden.value.response.status_code == 404


def test_approving_after_a_refused_edit_runs_the_values_the_card_shows(
    served: tuple[str, str],
) -> None:
    base_url, url = served
    user_42 = _ui_client(base_url, USER_42)
    thread_id, _ = _ask(user_42, "Please refund ord_1002 because it arrived late")
    first = _pending(user_42, thread_id)
    refused = _answer(
        user_42, thread_id, _ui_edit(first["action_requests"][0], amount_minor="10.00")
    )
    _shows_refused_edit(refused, first, "$45.00")

    assert _answer(user_42, thread_id, {"decisions": [{"type": "approve"}]}) == {}
    messages = user_42.threads.get_state(thread_id)["values"]["messages"]
    [receipt] = [json.loads(m["content"]) for m in messages if m.get("name") == "refund_order"]
    assert receipt["status"] == "succeeded" and receipt["args_digest"] == first["args_digest"]
    assert _rows(url, AMOUNTS_SQL, "ord_1002") == [4500]


STATUSES_SQL = "SELECT status FROM writegate.proposals WHERE thread_id = %s"
LAST_AUDIT_SQL = (
    "SELECT user_id || ' ' || status || ' ' || (result->>'reason') FROM writegate.audit "
    "WHERE thread_id = %s ORDER BY audit_id DESC LIMIT 1"
)


def test_deleting_a_thread_cancels_its_waiting_approval_and_only_the_owner_can(
    served: tuple[str, str],
) -> None:
    base_url, url = served
    user_42, user_7 = _client(base_url, USER_42), _client(base_url, USER_7)
    thread_id, _ = _ask(user_42, REFUND_1001)
    assert _pending(user_42, thread_id)["operation"] == "refund_order"
    # Another user's delete is refused by the thread filter and ends nothing.
    with pytest.raises(httpx.HTTPStatusError):
        user_7.threads.delete(thread_id)
    assert _rows(url, STATUSES_SQL, thread_id) == ["awaiting_confirmation"]
    user_42.threads.delete(thread_id)
    assert _rows(url, STATUSES_SQL, thread_id) == ["cancelled"]
    assert _rows(url, LAST_AUDIT_SQL, thread_id) == ["user_42 cancelled thread_deleted"]
