"""Agent Chat UI (langchain-ai/agent-chat-ui at fdc87e6) in Chromium, against `langgraph dev`.

The chat is opened on a thread whose refund waits, as a person who reloads it does: the
server's URL and assistant `writegate` in its address, the requester's demo token as its
API key. Each path counts refunds at the simulated provider, the thread's proposals'
statuses and the last audit row.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import TOKEN, Ledger, field
from tests.integration.front_end_payloads import CLIENT_CONTENT, DO_NOT_RENDER

REFUSAL_LABEL = "Your Answer Was Refused"  # the refusal field's name as the UI labels it
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]  # the first run builds the UI


@pytest.fixture
def person(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    context.add_init_script(f"localStorage.setItem('lg:chat:apiKey', {json.dumps(TOKEN)});")
    page = context.new_page()
    page.set_default_timeout(60_000)
    yield page
    context.close()


def _open(page: Page, agent_chat_ui: str, ledger: Ledger, thread_id: str) -> None:
    page.goto(
        f"{agent_chat_ui}/?apiUrl={ledger.base_url}&assistantId=writegate&threadId={thread_id}"
    )
    expect(page.get_by_role("button", name="Mark as Resolved")).to_be_visible()


def test_mark_as_resolved_cancels(person: Page, agent_chat_ui: str, ledger: Ledger) -> None:
    order_id = ledger.new_order("res")
    thread_id = ledger.ask(order_id)
    _open(person, agent_chat_ui, ledger, thread_id)
    person.get_by_role("button", name="Mark as Resolved").click()  # with the head's checkpoint
    assert ledger.settled(thread_id, runs=2) == ["cancelled"]
    assert ledger.client.threads.get_state(thread_id)["interrupts"] == []
    assert ledger.refunds(order_id) == []
    row = ledger.audit(thread_id)
    assert (row["status"], row["user_id"]) == ("cancelled", "user_42")


def test_a_new_message_cancels_the_waiting_refund(
    person: Page, agent_chat_ui: str, ledger: Ledger
) -> None:
    """The UI answers the waiting call itself ("Successfully handled tool call.") before
    the person's message: writegate cancels the refund and says so in that answer's place."""
    order_id = ledger.new_order("new")
    thread_id = ledger.ask(order_id)
    _open(person, agent_chat_ui, ledger, thread_id)
    person.get_by_placeholder("Type your message...").fill("what are my orders?")
    person.get_by_role("button", name="Send").click()
    assert ledger.settled(thread_id, runs=2) == ["cancelled"]
    assert ledger.refunds(order_id) == []
    row = ledger.audit(thread_id)
    assert (row["status"], row["user_id"]) == ("cancelled", "user_42")
    tools = [m for m in ledger.messages(thread_id) if m["type"] == "tool"]
    theirs = [m for m in tools if m["id"].startswith(DO_NOT_RENDER)]
    assert len(theirs) == 1 and json.loads(theirs[0]["content"])["code"] == "cancelled"
    assert CLIENT_CONTENT not in json.dumps(tools)


def test_a_refused_edit_is_in_sight_then_approve_runs_what_it_names(
    person: Page, agent_chat_ui: str, ledger: Ledger, tmp_path: Path
) -> None:
    order_id = ledger.new_order("ref")
    thread_id = ledger.ask(order_id)
    _open(person, agent_chat_ui, ledger, thread_id)
    field(person, "Amount Minor").fill("99999")  # more than the order's ¥199.00
    person.get_by_role("button", name="Submit", exact=True).click()
    assert ledger.settled(thread_id, runs=2) == ["awaiting_confirmation"]
    assert ledger.refunds(order_id) == []
    # Where the person looks after Submit (the chat keeps to its bottom, next to the
    # UI's own "Response submitted successfully." toast): the refusal, and what runs.
    notice = field(person, REFUSAL_LABEL)
    expect(notice).to_have_value(re.compile(r"\(validation_failed\)\. Nothing was changed"))
    label = person.locator("p", has_text=re.compile(f"^{REFUSAL_LABEL}$"))
    expect(label).to_be_in_viewport(ratio=1)
    expect(notice).to_be_in_viewport(ratio=0.5)
    person.screenshot(path=str(tmp_path / "refused.png"))
    expect(field(person, "Amount Minor")).to_have_value("19900")
    person.get_by_role("button", name="Approve", exact=True).click()
    assert ledger.settled(thread_id, runs=3) == ["executed"]
    assert ledger.refunds(order_id) == [19900]
    row = ledger.audit(thread_id)
    assert (row["event"], row["status"], row["user_id"]) == ("execute", "succeeded", "user_42")
