"""Agent Inbox (langchain-ai/agent-inbox at f38301b) in Chromium, against `langgraph dev`.

The inbox is set up as docs/agent-inbox.md says: graph `writegate`, the server's URL,
the requester's demo token as its API key. Each path asks for a refund of its own order
through the SDK, answers it by clicking in the inbox, and counts: refunds at the simulated
provider, the thread's proposals' statuses, the last audit row.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import timedelta

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import TOKEN, Ledger, field
from writegate import Writegate

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]  # the first run builds the UI

REASON = "Wrong order: the customer meant another one"
APPROVER = "demo-approver"  # examples/server_auth.py: approver_1 of tenant_hz, the role
LARGE = 800000  # ¥8000.00: above the shipped policy's second-approver threshold
INBOX = {"id": "writegate", "graphId": "writegate", "name": "writegate", "selected": True}


@pytest.fixture
def person(browser: Browser, ledger: Ledger) -> Iterator[Page]:
    yield from _signed_in(browser, ledger)


def _signed_in(browser: Browser, ledger: Ledger, token: str = TOKEN) -> Iterator[Page]:
    """A person's own browser, with the inbox added in its settings (kept in
    localStorage), signed in with `token` (by default the requester's)."""
    inboxes = [{**INBOX, "deploymentUrl": ledger.base_url, "createdAt": "2026-01-01T00:00:00Z"}]
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    context.add_init_script(
        f"localStorage.setItem('inbox:agent_inboxes', {json.dumps(json.dumps(inboxes))});"
        f"localStorage.setItem('inbox:langchain_api_key', {json.dumps(token)});"
    )
    page = context.new_page()
    page.set_default_timeout(60_000)
    yield page
    context.close()


def _list(agent_inbox: str) -> str:
    return f"{agent_inbox}/?agent_inbox=writegate&offset=0&limit=100&inbox=interrupted"


def _open(page: Page, agent_inbox: str, order_id: str, thread_id: str, row: str = "") -> None:
    """The interrupted list shows `order_id`'s refund (its row opens with `row`, by
    default its title); then its card, at the address a click on the row sets (in this
    build the row's click does not navigate headless). The list is read in a page of its
    own, closed after: the list rewrites its own address, and a rewrite cut short turns
    into a navigation of its page that would cut the card's load short."""
    lister = page.context.new_page()
    try:
        lister.set_default_timeout(60_000)
        lister.goto(_list(agent_inbox))
        expect(lister.get_by_text(row or f"Refund order {order_id}")).to_have_count(1)
    finally:
        lister.close()
    page.goto(f"{_list(agent_inbox)}&view_state_thread_id={thread_id}")
    expect(page.get_by_text("Mark as Resolved")).to_be_visible()


def test_accept_refunds_once(person: Page, agent_inbox: str, ledger: Ledger) -> None:
    order_id = ledger.new_order("acc")
    thread_id = ledger.ask(order_id)
    _open(person, agent_inbox, order_id, thread_id)
    person.get_by_role("button", name="Accept", exact=True).click()
    assert ledger.settled(thread_id, runs=2) == ["executed"]
    assert ledger.refunds(order_id) == [19900]
    row = ledger.audit(thread_id)
    assert (row["event"], row["status"], row["user_id"]) == ("execute", "succeeded", "user_42")


def test_response_declines_with_the_persons_reason(
    person: Page, agent_inbox: str, ledger: Ledger
) -> None:
    order_id = ledger.new_order("rsp")
    thread_id = ledger.ask(order_id)
    _open(person, agent_inbox, order_id, thread_id)
    person.get_by_placeholder("Your response here...").fill(REASON)
    person.get_by_role("button", name="Send Response").click()
    assert ledger.settled(thread_id, runs=2) == ["declined"]
    assert ledger.refunds(order_id) == []
    row = ledger.audit(thread_id)
    assert (row["status"], row["user_id"]) == ("declined", "user_42")
    assert row["result"]["person_said"] == REASON
    answers = [m for m in ledger.messages(thread_id) if m["type"] == "tool"]
    assert REASON in json.dumps(answers)  # the model reads the person's reason


def test_edit_shows_the_fields_asks_again_then_accept(
    person: Page, agent_inbox: str, ledger: Ledger
) -> None:
    order_id = ledger.new_order("edt")
    thread_id = ledger.ask(order_id)
    _open(person, agent_inbox, order_id, thread_id)
    amount = field(person, "Amount Minor")
    expect(amount).to_have_value("19900")
    expect(field(person, "Order Id")).to_have_value(order_id)
    amount.fill("1000")
    person.get_by_role("button", name="Submit", exact=True).click()
    # Asked again: a new proposal of ¥10.00, the old one superseded; nothing ran yet.
    assert ledger.settled(thread_id, runs=2) == ["superseded", "awaiting_confirmation"]
    assert ledger.refunds(order_id) == []
    _open(person, agent_inbox, order_id, thread_id)
    expect(field(person, "Amount Minor")).to_have_value("1000")
    person.get_by_role("button", name="Accept", exact=True).click()
    assert ledger.settled(thread_id, runs=3) == ["superseded", "executed"]
    assert ledger.refunds(order_id) == [1000]
    row = ledger.audit(thread_id)
    assert (row["event"], row["status"], row["user_id"]) == ("execute", "succeeded", "user_42")


def test_mark_as_resolved_leaves_it_to_the_operator(
    person: Page, agent_inbox: str, ledger: Ledger
) -> None:
    """Agent Inbox offers no "Ignore" for LangChain's interrupts (`allow_ignore` false):
    its way to drop one is "Mark as Resolved", a state update as `__end__` that runs no
    writegate code. The proposal waits, no client asks it, and the operator's orphan
    check (the thread is checkpointed in writegate's database) ends it."""
    order_id = ledger.new_order("ign")
    thread_id = ledger.ask(order_id)
    _open(person, agent_inbox, order_id, thread_id)
    person.get_by_role("button", name="Mark as Resolved").click()
    expect(
        person.get_by_text("Ignored thread", exact=True)
    ).to_be_visible()  # the inbox's own toast
    assert ledger.client.threads.get_state(thread_id)["interrupts"] == []
    assert ledger.statuses(thread_id) == ["awaiting_confirmation"]
    with Writegate.open(ledger.url, tools=[]) as wg:
        wg.end_orphaned("operator:browser", timedelta(0))
    assert ledger.statuses(thread_id) == ["cancelled"]
    assert ledger.refunds(order_id) == []
    row = ledger.audit(thread_id)
    assert (row["status"], row["user_id"]) == ("cancelled", "operator:browser")


def test_a_second_person_on_a_stale_card_changes_nothing(
    browser: Browser, person: Page, agent_inbox: str, ledger: Ledger
) -> None:
    """Two people work the same inbox: both open the same waiting refund; the first
    accepts, then the second, whose card still shows the question, accepts too."""
    order_id = ledger.new_order("two")
    thread_id = ledger.ask(order_id)
    for second in _signed_in(browser, ledger):
        _open(person, agent_inbox, order_id, thread_id)
        _open(second, agent_inbox, order_id, thread_id)
        person.get_by_role("button", name="Accept", exact=True).click()
        assert ledger.settled(thread_id, runs=2) == ["executed"]
        second.get_by_role("button", name="Accept", exact=True).click()
        assert ledger.settled(thread_id, runs=3) == ["executed"]
        assert ledger.refunds(order_id) == [19900]
        second.goto(_list(agent_inbox))
        expect(second.get_by_text(f"Refund order {order_id}")).to_have_count(0)
    row = ledger.audit(thread_id)
    assert (row["event"], row["status"], row["user_id"]) == ("execute", "succeeded", "user_42")


def test_a_refused_edit_is_in_sight_then_accept_runs_what_it_names(
    person: Page, agent_inbox: str, ledger: Ledger
) -> None:
    order_id = ledger.new_order("ref")
    thread_id = ledger.ask(order_id)
    _open(person, agent_inbox, order_id, thread_id)
    field(person, "Amount Minor").fill("99999")  # more than the order's ¥199.00
    person.get_by_role("button", name="Submit", exact=True).click()
    assert ledger.settled(thread_id, runs=2) == ["awaiting_confirmation"]
    assert ledger.refunds(order_id) == []
    # After Submit the card shows the new question: its last field, above Accept, says
    # why, and reopened, the description beside the card opens with the refusal.
    notice = field(person, "Your Answer Was Refused")
    expect(notice).to_have_value(re.compile(r"\(validation_failed\)\. Nothing was changed"))
    expect(notice).to_be_in_viewport(ratio=0.5)
    refused = "Refused (validation_failed): refund of ¥999.99 exceeds"
    _open(person, agent_inbox, order_id, thread_id, row=refused)  # the row says so too
    expect(person.get_by_text(refused)).to_be_in_viewport()
    expect(field(person, "Amount Minor")).to_have_value("19900")
    person.get_by_role("button", name="Accept", exact=True).click()
    assert ledger.settled(thread_id, runs=3) == ["executed"]
    assert ledger.refunds(order_id) == [19900]
    row = ledger.audit(thread_id)
    assert (row["event"], row["status"], row["user_id"]) == ("execute", "succeeded", "user_42")


@pytest.fixture
def approver(browser: Browser, ledger: Ledger) -> Iterator[Page]:
    yield from _signed_in(browser, ledger, APPROVER)


def test_a_second_approver_accepts_from_their_own_inbox(
    approver: Page, agent_inbox: str, ledger: Ledger
) -> None:
    """The requester confirms a large refund; the approver, signed in as themselves,
    finds it in their inbox and accepts: it runs once, on their approval."""
    order_id = ledger.new_order("sec", LARGE)
    thread_id = ledger.ask(order_id)
    ledger.confirm(thread_id)
    assert ledger.refunds(order_id) == []
    _open(approver, agent_inbox, order_id, thread_id)
    approver.get_by_role("button", name="Accept", exact=True).click()
    assert ledger.settled(thread_id, runs=3) == ["executed"]
    assert ledger.refunds(order_id) == [LARGE]
    rows = ledger.audits(thread_id)
    assert ("second_approval", "confirmed", "approver_1", "approver_1") in rows
    assert rows[-1] == ("execute", "succeeded", "user_42", "approver_1")
    last = ledger.messages(thread_id)[-1]  # the requester's thread holds the receipt
    assert last["type"] == "tool" and json.loads(last["content"])["status"] == "succeeded"
    approver.goto(_list(agent_inbox))  # answered: it left the approver's inbox
    expect(approver.get_by_text(f"Refund order {order_id}")).to_have_count(0)


def test_a_second_approver_declines_from_their_own_inbox(
    approver: Page, agent_inbox: str, ledger: Ledger
) -> None:
    order_id = ledger.new_order("sdc", LARGE)
    thread_id = ledger.ask(order_id)
    ledger.confirm(thread_id)
    _open(approver, agent_inbox, order_id, thread_id)
    approver.get_by_placeholder("Your response here...").fill(REASON)
    approver.get_by_role("button", name="Send Response").click()
    assert ledger.settled(thread_id, runs=3) == ["declined"]
    assert ledger.refunds(order_id) == []
    declined = ("second_decline", "declined", "approver_1", "approver_1")
    assert ledger.audits(thread_id)[-1] == declined
    assert ledger.audit(thread_id)["result"]["person_said"] == REASON
    last = ledger.messages(thread_id)[-1]  # the requester's thread says so, with the words
    assert last["type"] == "tool" and REASON in last["content"]
