"""`langgraph dev` with the example auth handler (`langgraph.auth.json`), driven by the SDK.

One server for the module. Identity: a client authenticated by its bearer token acts
as that user only; whatever its assistant's context, its run's `configurable` or its
run's context claim (another user, another tenant, roles, trust) is refused before
anything is proposed, counted at the provider, in the proposals and in the audit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from langgraph_sdk import get_sync_client
from langgraph_sdk.client import SyncLangGraphClient

from tests.integration.studio_helpers import langgraph_dev
from writegate.checkpoints.migrate import setup_database
from writegate.tools.seed import seed_demo

pytestmark = pytest.mark.slow

USER_42, USER_7 = "demo-user-42", "demo-user-7"  # the example handler's demo tokens
REFUND_1001 = "Please refund ord_1001 because the item arrived broken"
REFUND_2002 = "Please refund ord_2002 because the item arrived broken"

COUNT_PROPOSALS_SQL = "SELECT count(*) FROM wg_proposals WHERE thread_id = ANY(%s)"
COUNT_AUDIT_SQL = "SELECT count(*) FROM wg_audit WHERE thread_id = ANY(%s)"
SUBJECTS_SQL = "SELECT DISTINCT subject FROM wg_proposals WHERE thread_id = %s"
AMOUNTS_SQL = "SELECT amount_minor FROM provider.refunds WHERE order_id = %s ORDER BY created_at"


@pytest.fixture(scope="module")
def served(
    create_database: Callable[[], str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """(server URL, database URL) of `langgraph dev --config langgraph.auth.json`."""
    url = create_database()
    setup_database(url)
    with psycopg.connect(url, autocommit=True) as conn:
        seed_demo(conn)
    workdir: Path = tmp_path_factory.mktemp("studio_auth")
    with langgraph_dev(workdir, url, config_file="langgraph.auth.json") as base_url:
        yield base_url, url


def _client(base_url: str, token: str | None = None, **headers: str) -> SyncLangGraphClient:
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return get_sync_client(url=base_url, api_key=None, headers=headers)


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
