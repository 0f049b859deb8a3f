"""The audit, a page at a time: `wg.audit(..., cursor=, order=)` walks 10,000 rows and
gets each exactly once while another connection keeps writing new rows for the same
tenant; filtered walks give exactly their rows; a cursor that is not one is refused."""

from __future__ import annotations

import secrets
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from writegate import ValidationFailed, Writegate
from writegate.approval.views import Page, encode_cursor

ROWS = 10_000
PAGE = 700
SEED_SQL = """
INSERT INTO writegate.audit (tenant_id, user_id, tool_name, event, status, duration_ms)
SELECT %(tenant)s, 'user_' || n %% 7, CASE WHEN n %% 3 = 0 THEN 'refund' ELSE 'lookup' END,
       'read', CASE WHEN n %% 5 = 0 THEN 'rejected' ELSE 'succeeded' END, 0
FROM generate_series(1, %(rows)s) AS n
RETURNING audit_id, tool_name, status"""
NEW_ROWS_SQL = """
INSERT INTO writegate.audit (tenant_id, user_id, tool_name, event, status, duration_ms)
SELECT %s, 'writer', 'refund', 'read', 'succeeded', 0 FROM generate_series(1, 5)"""


@pytest.fixture(scope="module")
def url(create_database: Callable[[], str]) -> str:
    return create_database()


@pytest.fixture(scope="module")
def wg(url: str) -> Iterator[Writegate]:
    with Writegate.open(url, tools=[]) as gate:
        yield gate


@pytest.fixture(scope="module")
def seeded(url: str, wg: Writegate) -> tuple[str, list[dict[str, Any]]]:
    tenant = f"tenant_{secrets.token_hex(4)}"
    with psycopg.connect(url, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
        rows = conn.execute(SEED_SQL, {"tenant": tenant, "rows": ROWS}).fetchall()
    return tenant, rows


class Writer(threading.Thread):
    """New rows for the tenant (`sql`, five audit rows by default), a transaction at a
    time, on a connection of its own, until stopped; `wait_for_more()` returns once it
    has committed more since the last call."""

    def __init__(self, url: str, tenant: str, sql: str = NEW_ROWS_SQL) -> None:
        super().__init__(daemon=True)
        self.url, self.tenant, self.sql = url, tenant, sql
        self.batches, self.seen = 0, 0
        self.changed = threading.Condition()
        self.stop = threading.Event()
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                while not self.stop.is_set():
                    conn.execute(self.sql, (self.tenant,))
                    with self.changed:
                        self.batches += 1
                        self.changed.notify_all()
        except BaseException as exc:  # reported by the test, not lost in the thread
            self.failure = exc
            with self.changed:
                self.changed.notify_all()

    def wait_for_more(self) -> None:
        with self.changed:
            self.changed.wait_for(lambda: self.batches > self.seen or self.failure is not None)
            assert self.failure is None, self.failure
            self.seen = self.batches


def walk(wg: Writegate, tenant: str, writer: Writer | None = None, **query: Any) -> list[int]:
    """Every page of the tenant's audit; new rows are written between pages."""
    ids: list[int] = []
    cursor = None
    while True:
        page = wg.audit(tenant, limit=PAGE, cursor=cursor, **query)
        assert isinstance(page, Page) and isinstance(page, list) and page.items == list(page)
        assert len(page) <= PAGE
        ids += [row.audit_id for row in page]
        if writer is not None:
            writer.wait_for_more()
        cursor = page.next_cursor
        if cursor is None:
            return ids


@pytest.mark.parametrize("order", ["oldest", "newest"])
def test_a_walk_gets_each_row_once_while_rows_arrive(
    url: str, wg: Writegate, seeded: tuple[str, list[dict[str, Any]]], order: str
) -> None:
    tenant, rows = seeded
    writer = Writer(url, tenant)
    writer.start()
    try:
        ids = walk(wg, tenant, writer, order=order)
    finally:
        writer.stop.set()
        writer.join()
    assert writer.batches >= ROWS // PAGE  # rows arrived between every two pages
    counts = Counter(ids)
    assert not {i for i, n in counts.items() if n > 1}  # nothing twice, new rows neither
    assert {row["audit_id"] for row in rows} <= set(counts)  # every row there at the start
    assert ids == sorted(ids, reverse=order == "newest")


def test_a_filtered_walk_gets_exactly_its_rows(
    wg: Writegate, seeded: tuple[str, list[dict[str, Any]]]
) -> None:
    tenant, rows = seeded
    wanted = [
        r["audit_id"] for r in rows if (r["tool_name"], r["status"]) == ("refund", "rejected")
    ]
    got = walk(wg, tenant, tool_name="refund", status="rejected", order="newest")
    seeded_ids = {r["audit_id"] for r in rows}
    assert [i for i in got if i in seeded_ids] == sorted(wanted, reverse=True)


def test_the_last_page_has_no_cursor_and_the_old_call_still_reads(
    wg: Writegate, seeded: tuple[str, list[dict[str, Any]]]
) -> None:
    tenant, rows = seeded
    first = wg.audit(tenant, limit=3)
    assert [r.audit_id for r in first] == [r["audit_id"] for r in rows[:3]]
    assert first.next_cursor is not None
    assert wg.audit(f"tenant_{secrets.token_hex(4)}").next_cursor is None  # empty: no more


@pytest.mark.parametrize(
    "cursor",
    [
        "not a cursor",
        "e30",
        12,
        "eyJvZiI6ImF1ZGl0Iiwib3JkZXIiOiJuZXdlc3QiLCJhZnRlciI6WzFdfQ",
        encode_cursor("audit", "oldest", ["1; drop"]),
    ],
)
def test_a_cursor_that_is_not_this_lists_is_refused(
    wg: Writegate, seeded: tuple[str, list[dict[str, Any]]], cursor: Any
) -> None:
    """Garbage, an empty object, a number, a newest-first cursor given for oldest, and
    one whose key is not an audit_id."""
    with pytest.raises(ValidationFailed) as refused:
        wg.audit(seeded[0], cursor=cursor, order="oldest")
    body = refused.value.to_dict()
    assert body["code"] == "validation_failed" and "cursor" in body["message"]


def test_an_order_that_is_not_one_is_refused(
    wg: Writegate, seeded: tuple[str, list[dict[str, Any]]]
) -> None:
    with pytest.raises(ValidationFailed):
        wg.audit(seeded[0], order="sideways")  # type: ignore[arg-type]
