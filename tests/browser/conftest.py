"""Fixtures of the browser runs: one `langgraph dev` (with the example auth handler) and
each front end served once per session, Debian's Chromium, and the counts a path ends
with: refunds at the simulated provider, the proposals' statuses, their last audit row.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from langgraph_sdk import get_sync_client
from langgraph_sdk.client import SyncLangGraphClient
from playwright.sync_api import Browser, Locator, Page
from psycopg.rows import dict_row

from tests.app_db import setup_app
from tests.browser.ui_servers import AGENT_CHAT_UI, AGENT_INBOX, absent_reason, served_ui
from tests.integration.studio_helpers import POSTGRES_CHECKPOINTER, langgraph_dev
from writegate.demo.seed import seed_demo

TOKEN = "demo-user-42"  # examples/server_auth.py: user_42 of tenant_hz
STATUSES_SQL = "SELECT status FROM writegate.proposals WHERE thread_id = %s ORDER BY created_at"
REFUNDS_SQL = "SELECT amount_minor FROM provider.refunds WHERE order_id = %s ORDER BY created_at"
AUDIT_SQL = (
    "SELECT a.event, a.status, a.user_id, a.error_code, a.result FROM writegate.audit a "
    "JOIN writegate.proposals p USING (proposal_id) WHERE p.thread_id = %s "
    "ORDER BY a.audit_id DESC LIMIT 1"
)
ORDER_SQL = (
    "INSERT INTO orders (order_id, tenant_id, user_id, currency, payable_minor) "
    "VALUES (%s, 'tenant_hz', 'user_42', 'CNY', %s)"
)
WAIT_S = 60.0


@pytest.fixture(scope="session")
def front_ends() -> None:
    for ui in (AGENT_INBOX, AGENT_CHAT_UI):  # no front ends here: nothing to drive
        if reason := absent_reason(ui):
            pytest.skip(reason)


@pytest.fixture(scope="module")
def browser(front_ends: None, request: pytest.FixtureRequest) -> Browser:
    chromium: Browser = request.getfixturevalue("chromium")  # the module's one browser
    return chromium


@pytest.fixture(scope="session")
def served(
    front_ends: None, create_database: Callable[[], str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """(server URL, database URL): `langgraph dev --config langgraph.auth.json`, its
    threads checkpointed in the database."""
    url = create_database()
    setup_app(url)
    with psycopg.connect(url, autocommit=True) as conn:
        seed_demo(conn)
    workdir = tmp_path_factory.mktemp("langgraph_dev")
    checkpointer = {"checkpointer": POSTGRES_CHECKPOINTER}  # threads the orphan check can judge
    with langgraph_dev(workdir, url, checkpointer, "langgraph.auth.json") as base_url:
        yield base_url, url


@pytest.fixture(scope="session")
def agent_inbox(front_ends: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with served_ui(AGENT_INBOX, tmp_path_factory.mktemp("agent_inbox") / "next.log") as url:
        yield url


@pytest.fixture(scope="session")
def agent_chat_ui(front_ends: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with served_ui(AGENT_CHAT_UI, tmp_path_factory.mktemp("agent_chat_ui") / "next.log") as url:
        yield url


def field(page: Page, label: str) -> Locator:
    """The text box both UIs draw for an argument, by the label they give it."""
    return page.locator(f"xpath=//p[normalize-space()='{label}']/following-sibling::textarea[1]")


class Ledger:
    """The demo's database as the tests read it, and the requester's SDK client."""

    def __init__(self, base_url: str, url: str) -> None:
        self.base_url, self.url = base_url, url
        self.client: SyncLangGraphClient = get_sync_client(url=base_url, api_key=TOKEN)

    def rows(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        with psycopg.connect(self.url, row_factory=dict_row) as conn:
            return conn.execute(sql, params).fetchall()

    def new_order(self, name: str, payable_minor: int = 19900) -> str:
        """A fresh order of user_42's (¥199.00 unless said), so each path counts its own
        refunds."""
        order_id = f"ord_{name}{int(time.time() * 1000) % 10**8}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(ORDER_SQL, (order_id, payable_minor))
        return order_id

    def ask(self, order_id: str) -> str:
        """A thread whose refund of `order_id` waits for its person; its id."""
        thread_id: str = self.client.threads.create()["thread_id"]
        text = f"Please refund {order_id} because the item arrived broken"
        request: Any = {"messages": [{"role": "user", "content": text}]}
        self.client.runs.wait(thread_id, "writegate", input=request)
        [question] = self.client.threads.get_state(thread_id)["interrupts"]
        assert question["value"]["args"]["order_id"] == order_id
        return thread_id

    def confirm(self, thread_id: str) -> None:
        """The requester confirms the waiting refund, re-typing its amount: above the
        second-approver threshold it then waits for an approver."""
        [question] = self.client.threads.get_state(thread_id)["interrupts"]
        asked = question["value"]
        shown = {f["name"]: f["display"] for f in asked["preview"]["fields"]}["amount_minor"]
        answer = {"action": "confirm", "proposal_id": asked["proposal_id"], "retyped": shown}
        self.client.runs.wait(thread_id, "writegate", command={"resume": answer})
        [question] = self.client.threads.get_state(thread_id)["interrupts"]
        assert question["value"]["awaiting"]["what"] == "second_approval"

    def audits(self, thread_id: str) -> list[tuple[Any, ...]]:
        """Every audit row of the thread's proposals: (event, status, user_id, approver)."""
        sql = (
            "SELECT a.event, a.status, a.user_id, a.approver FROM writegate.audit a "
            "JOIN writegate.proposals p USING (proposal_id) WHERE p.thread_id = %s "
            "ORDER BY a.audit_id"
        )
        return [tuple(r.values()) for r in self.rows(sql, thread_id)]

    def messages(self, thread_id: str) -> list[dict[str, Any]]:
        values: Any = self.client.threads.get_state(thread_id)["values"]
        return list(values["messages"])

    def refunds(self, order_id: str) -> list[int]:
        return [r["amount_minor"] for r in self.rows(REFUNDS_SQL, order_id)]

    def statuses(self, thread_id: str) -> list[str]:
        return [r["status"] for r in self.rows(STATUSES_SQL, thread_id)]

    def audit(self, thread_id: str) -> dict[str, Any]:
        [row] = self.rows(AUDIT_SQL, thread_id)
        return row

    def settled(self, thread_id: str, runs: int) -> list[str]:
        """The thread's proposals' statuses once it has had `runs` runs and none is
        pending or running (a UI returns before its run ends); fails after WAIT_S."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            seen = self.client.runs.list(thread_id, limit=100)
            if len(seen) >= runs and not {r["status"] for r in seen} & {"pending", "running"}:
                assert len(seen) == runs, f"{len(seen)} runs on the thread, {runs} expected"
                return self.statuses(thread_id)
            time.sleep(0.2)  # poll interval, not a wait for a state
        pytest.fail(f"thread {thread_id}: {len(seen)} runs, {runs} expected, in {WAIT_S:.0f} s")


@pytest.fixture(scope="session")
def ledger(served: tuple[str, str]) -> Ledger:
    return Ledger(*served)
