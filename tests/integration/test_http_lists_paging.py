"""The HTTP service's other lists page too: `GET /v1/threads` (newest first by default)
and `GET /v1/approvals` (`status=all` or one status, newest first). Each walk takes
2,000 seeded rows of one user, in pages, while another connection keeps adding rows
for that user; every seeded row comes exactly once, in (created_at, id) order, though
ten at a time share a `created_at`. Filters give exactly their rows; a cursor of
another list is refused."""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from psycopg.rows import dict_row

from tests.integration.http_fixtures import TENANT, make_key
from tests.integration.test_http_paging import walk
from tests.integration.test_paging import Writer
from writegate.approval.views import encode_cursor

ROWS = 2_000
PAGE = 200  # the most a page of either list holds
SEED_THREADS_SQL = f"""
INSERT INTO writegate.http_threads (thread_id, tenant_id, user_id, created_at)
SELECT 'th_seed_' || lpad(n::text, 5, '0'), '{TENANT}', %(user)s,
       timestamptz '2026-01-01 00:00:00+00' + (n / 10) * interval '1 second'
FROM generate_series(1, %(rows)s) AS n
RETURNING thread_id, created_at"""
NEW_THREADS_SQL = f"""
INSERT INTO writegate.http_threads (thread_id, tenant_id, user_id)
SELECT 'th_new_' || md5(random()::text), '{TENANT}', %s FROM generate_series(1, 5)"""
PROPOSAL_COLUMNS = """proposal_id, thread_id, tool_call_id, subject, tenant_id, operation,
    resource, args, args_digest, fingerprint, state_version, preview, policy_version,
    request_key, status, created_at, expires_at"""
SEED_PROPOSALS_SQL = f"""
INSERT INTO writegate.proposals ({PROPOSAL_COLUMNS})
SELECT 'prop_seed_' || %(user)s || lpad(n::text, 5, '0'), 'th_p_' || %(user)s || (n %% 4),
       'call_' || n, %(user)s, '{TENANT}',
       CASE WHEN n %% 2 = 0 THEN 'refund_order' ELSE 'create_ticket' END, 'order:x', '{{}}',
       'sha256:x', 'fp', 0, '{{}}', 'p1', 'seed:' || %(user)s || ':' || n,
       (ARRAY['declined', 'cancelled', 'expired'])[n %% 3 + 1], at, at + interval '1 hour'
FROM generate_series(1, %(rows)s) AS n,
     LATERAL (SELECT timestamptz '2026-01-01 00:00:00+00' + (n / 10) * interval '1 second') AS t(at)
RETURNING proposal_id, thread_id, operation, status, created_at"""
NEW_PROPOSALS_SQL = f"""
INSERT INTO writegate.proposals ({PROPOSAL_COLUMNS})
SELECT 'prop_new_' || k, 'th_new', 'call_' || k, %s, '{TENANT}', 'refund_order', 'order:x',
       '{{}}', 'sha256:x', 'fp', 0, '{{}}', 'p1', 'new:' || k, 'declined', now(),
       now() + interval '1 hour'
FROM (SELECT md5(random()::text) AS k FROM generate_series(1, 5)) AS fresh"""


@pytest.fixture(scope="module")
def user() -> str:
    return f"pager_{secrets.token_hex(4)}"


@pytest.fixture(scope="module")
def who(url: str, user: str) -> dict[str, str]:
    return {"Authorization": "Bearer " + make_key(url, user)}


@pytest.fixture(scope="module")
def seeded(url: str, user: str) -> Iterator[dict[str, list[dict[str, Any]]]]:
    params = {"user": user, "rows": ROWS}
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        threads = conn.execute(SEED_THREADS_SQL, params).fetchall()
        proposals = conn.execute(SEED_PROPOSALS_SQL, params).fetchall()
    yield {"threads": threads, "proposals": proposals}


def in_order(rows: list[dict[str, Any]], id_key: str, order: str) -> list[str]:
    ordered = sorted(rows, key=lambda r: (r["created_at"], r[id_key]), reverse=order == "newest")
    return [r[id_key] for r in ordered]


def walk_while_writing(
    client: TestClient, who: dict[str, str], writer: Writer, path: str, key: str, **query: Any
) -> list[dict[str, Any]]:
    """`walk`, with new rows committed by `writer` between every two pages."""
    seen: list[dict[str, Any]] = []
    cursor = None
    writer.start()
    try:
        while True:
            params = {**query, **({"cursor": cursor} if cursor else {})}
            answer = client.get(path, headers=who, params=params)
            assert answer.status_code == 200, answer.text
            body = answer.json()
            assert len(body[key]) <= query["limit"]
            seen += body[key]
            writer.wait_for_more()
            if (cursor := body["next_cursor"]) is None:
                return seen
    finally:
        writer.stop.set()
        writer.join()


def each_seeded_once(got: list[str], seeded: list[str], order_expected: list[str]) -> None:
    counts = Counter(got)
    assert not {i for i, n in counts.items() if n > 1}  # nothing twice, new rows neither
    assert set(seeded) <= set(counts)  # every row there at the start
    assert [i for i in got if i in set(seeded)] == order_expected


# Per list: its path, the body's key, the row's id, the SQL that adds rows, the query.
LISTS = {
    "threads": ("/v1/threads", "threads", "thread_id", NEW_THREADS_SQL, {}),
    "proposals": (
        "/v1/approvals",
        "approvals",
        "proposal_id",
        NEW_PROPOSALS_SQL,
        {"status": "all"},
    ),
}


@pytest.mark.parametrize("order", ["oldest", "newest"])
@pytest.mark.parametrize("listed", list(LISTS))
def test_a_list_pages_once_each_while_rows_arrive(
    client: TestClient,
    url: str,
    user: str,
    who: dict[str, str],
    seeded: Any,
    listed: str,
    order: str,
) -> None:
    path, key, id_key, new_rows, query = LISTS[listed]
    writer = Writer(url, user, new_rows)
    got = walk_while_writing(client, who, writer, path, key, limit=PAGE, order=order, **query)
    assert writer.batches >= ROWS // PAGE  # rows arrived between every two pages
    rows = seeded[listed]
    each_seeded_once(
        [item[id_key] for item in got],
        [r[id_key] for r in rows],
        in_order(rows, id_key, order),
    )


def test_the_threads_are_newest_first_by_default(
    client: TestClient, who: dict[str, str], seeded: Any
) -> None:
    first = client.get("/v1/threads", headers=who, params={"limit": 30}).json()
    newest = client.get("/v1/threads", headers=who, params={"limit": 30, "order": "newest"})
    assert first == newest.json() and first["next_cursor"] is not None
    opened = [(t["created_at"], t["thread_id"]) for t in first["threads"]]
    assert opened == sorted(opened, reverse=True) and len(opened) == 30


def test_a_filtered_approvals_walk_gets_exactly_its_rows(
    client: TestClient, who: dict[str, str], seeded: Any
) -> None:
    rows = seeded["proposals"]
    thread = rows[1]["thread_id"]  # n = 2: refunds, every third declined
    wanted = [
        r
        for r in rows
        if (r["thread_id"], r["operation"], r["status"]) == (thread, "refund_order", "declined")
    ]
    assert wanted
    query = {"status": "declined", "tool_name": "refund_order", "thread_id": thread}
    got = walk(client, who, "/v1/approvals", "approvals", limit=7, **query)
    assert [a["proposal_id"] for a in got] == in_order(wanted, "proposal_id", "newest")


@pytest.mark.parametrize(
    ("path", "cursor"),
    [
        ("/v1/threads", encode_cursor("audit", "newest", [1])),
        ("/v1/threads", encode_cursor("threads", "oldest", ["2026-01-01T00:00:00+00:00", "x"])),
        ("/v1/approvals", encode_cursor("threads", "newest", ["2026-01-01T00:00:00+00:00", "x"])),
        ("/v1/approvals", encode_cursor("my_proposals", "newest", ["not a time", "x"])),
    ],
)
def test_a_cursor_of_another_list_or_order_is_a_422(
    client: TestClient, who: dict[str, str], path: str, cursor: str
) -> None:
    query = {"cursor": cursor} if path == "/v1/threads" else {"cursor": cursor, "status": "all"}
    answer = client.get(path, headers=who, params=query)
    assert answer.status_code == 422 and answer.json()["code"] == "validation_failed", answer.text
    assert "cursor" in answer.json()["message"]
