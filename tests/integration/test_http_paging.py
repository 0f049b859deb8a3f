"""The HTTP lists page: `?cursor=&limit=&order=`, with `next_cursor` in the body, for
the audit (a non-auditor's pages hold only their own rows, and are still full) and the
second approver's queue."""

from __future__ import annotations

import secrets
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from tests.integration.http_fixtures import TENANT, make_key

ROWS_SQL = """
INSERT INTO writegate.audit (tenant_id, user_id, tool_name, event, status, duration_ms)
SELECT %s, CASE WHEN n %% 2 = 0 THEN 'user_42' ELSE 'user_7' END, %s, 'read', 'succeeded', 0
FROM generate_series(1, 50) AS n RETURNING audit_id, user_id"""


@pytest.fixture(scope="module")
def alice(url: str) -> dict[str, str]:
    return {"Authorization": "Bearer " + make_key(url, "user_42")}


@pytest.fixture(scope="module")
def auditor(url: str) -> dict[str, str]:
    return {"Authorization": "Bearer " + make_key(url, "user_9", roles=("auditor",))}


@pytest.fixture(scope="module")
def probe(url: str) -> tuple[str, list[dict[str, Any]]]:
    """50 audit rows of a tool of their own, half of them user_42's."""
    tool = f"probe_{secrets.token_hex(4)}"
    with psycopg.connect(url, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
        return tool, conn.execute(ROWS_SQL, (TENANT, tool)).fetchall()


def walk(client: TestClient, who: dict[str, str], path: str, key: str, **query: Any) -> list:
    items, cursor, pages = [], None, 0
    while True:
        params = {**query, **({"cursor": cursor} if cursor else {})}
        answer = client.get(path, headers=who, params=params)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert len(body[key]) <= query["limit"] and "next_cursor" in body
        items += body[key]
        pages += 1
        if (cursor := body["next_cursor"]) is None:
            assert pages >= 2 or len(items) <= query["limit"]
            return items


@pytest.mark.parametrize("order", ["oldest", "newest"])
def test_the_audit_pages_with_a_cursor(
    client: TestClient, auditor: dict[str, str], probe: tuple[str, list[dict[str, Any]]], order: str
) -> None:
    tool, rows = probe
    got = walk(client, auditor, "/v1/audit", "rows", limit=7, order=order, tool_name=tool)
    ids = [r["audit_id"] for r in rows]
    assert [r["audit_id"] for r in got] == (ids if order == "oldest" else ids[::-1])


def test_a_non_auditors_pages_are_their_own_rows_and_full(
    client: TestClient, alice: dict[str, str], probe: tuple[str, list[dict[str, Any]]]
) -> None:
    tool, rows = probe
    first = client.get("/v1/audit", headers=alice, params={"tool_name": tool, "limit": 10})
    assert len(first.json()["rows"]) == 10  # filtered in the query, not after it
    got = walk(client, alice, "/v1/audit", "rows", limit=10, tool_name=tool)
    assert [r["audit_id"] for r in got] == [
        r["audit_id"] for r in rows if r["user_id"] == "user_42"
    ]


@pytest.mark.parametrize("cursor", ["bm90IGEgY3Vyc29y", "e30"])
def test_a_cursor_that_is_not_one_is_a_422(
    client: TestClient, alice: dict[str, str], cursor: str
) -> None:
    answer = client.get("/v1/audit", headers=alice, params={"cursor": cursor})
    assert answer.status_code == 422 and answer.json()["code"] == "validation_failed"
    assert "cursor" in answer.json()["message"] and "Traceback" not in answer.text


def test_the_review_queue_takes_a_cursor_and_a_limit(client: TestClient, url: str) -> None:
    approver = {"Authorization": "Bearer " + make_key(url, "user_5", roles=("approver",))}
    page = client.get("/v1/reviews", headers=approver, params={"limit": 1, "order": "newest"})
    assert page.status_code == 200 and "next_cursor" in page.json(), page.text
    refused = client.get("/v1/reviews", headers=approver, params={"limit": 0})
    assert refused.status_code == 422
