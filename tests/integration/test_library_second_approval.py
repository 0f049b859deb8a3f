"""A second approver through the public API only: `wg.awaiting_second_approval`,
`wg.approve_as_second`, `wg.decline_as_second` and `wg.revoke`, on a user's own refund
tool under the shipped policy. Refunds are counted at the tool's own downstream record."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.types import Command

from tests.integration.library_helpers import (
    asked,
    hand_built,
    last_tool,
    refund_order,
    refunds,
    scripted,
    tool_call,
)
from writegate import Identity, MissingIdentity, ProposalView, Writegate, WritegateError

TENANT = "tenant_2nd"
EXPIRE_SQL = "UPDATE writegate.proposals SET expires_at = now() WHERE proposal_id = %s"
REQUESTER = Identity("clerk", TENANT)
APPROVER = Identity("lead", TENANT, frozenset({"approver"}))


@pytest.fixture(scope="module")
def wg(create_database: Callable[[], str]) -> Iterator[Writegate]:
    with Writegate.open(create_database(), tools=[refund_order]) as gate:
        yield gate


def _middleware(wg: Writegate, model: Any) -> Any:
    return create_agent(
        model, tools=[refund_order], middleware=[wg.middleware()], checkpointer=wg.checkpointer
    )


WAYS: dict[str, Callable[[Writegate, Any], Any]] = {
    "tool_node": hand_built,
    "middleware": _middleware,
    "build_agent": lambda wg, model: wg.build_agent(model),
}


class Thread:
    """The requester's conversation: a ¥8,000.00 refund confirmed with its re-typed
    amount, now waiting for a second approver (score 6: +3 amount, +2 external, +1)."""

    def __init__(self, wg: Writegate, who: Identity = REQUESTER, way: str = "tool_node") -> None:
        self.order = f"ord_{secrets.token_hex(4)}"
        call = tool_call("refund_order", order_ref=self.order, cents=800_000, currency="CNY")
        self.graph = WAYS[way](wg, scripted([call], "done", "done"))
        given = {"thread_id": f"th_{secrets.token_hex(5)}", "user_id": who.user_id}
        self.config = {"configurable": {**given, "tenant_id": who.tenant_id}}
        (self.question,) = asked(self.graph.invoke({"messages": [HumanMessage("go")]}, self.config))
        assert self.question.value["preview"]["confirmation"]["tier"] == "second_approver"
        self.proposal_id: str = self.question.value["proposal_id"]
        (waiting,) = asked(self.confirm("¥8,000.00"))
        assert waiting.value["awaiting"]["what"] == "second_approval"

    def confirm(self, retyped: str | None = None) -> dict[str, Any]:
        answer = {"action": "confirm", "proposal_id": self.proposal_id}
        if retyped is not None:
            answer["retyped"] = retyped
        return dict(self.graph.invoke(Command(resume=answer), self.config))


def refused(call: Callable[[], Any]) -> dict[str, Any]:
    with pytest.raises(WritegateError) as caught:
        call()
    body = caught.value.to_dict()
    assert set(body) >= {"code", "message", "retryable"} and body["retryable"] is False
    return body


def test_approved_by_a_second_person_it_runs_once(wg: Writegate) -> None:
    thread = Thread(wg)
    waiting = [
        p for p in wg.awaiting_second_approval(APPROVER) if p.proposal_id == thread.proposal_id
    ]
    (seen,) = waiting
    assert isinstance(seen, ProposalView) and seen.status == "awaiting_second_approval"
    assert seen.preview == thread.question.value["preview"]  # exactly what the requester saw
    assert (seen.requested_by, seen.decided_by, seen.second_approver) == ("clerk", "clerk", None)
    assert refunds(thread.order) == 0

    approved = wg.approve_as_second(APPROVER, thread.proposal_id)
    assert (approved.status, approved.second_approver) == ("executed", "lead")
    assert refunds(thread.order) == 1  # the last approval ran it
    assert thread.proposal_id not in {p.proposal_id for p in wg.awaiting_second_approval(APPROVER)}

    receipt = last_tool(thread.confirm())  # the requester's thread resumes
    assert receipt["status"] == "succeeded" and refunds(thread.order) == 1
    again = refused(lambda: wg.approve_as_second(APPROVER, thread.proposal_id))
    assert (again["code"], again["details"]["state"]) == ("proposal_not_pending", "executed")
    too_late = refused(lambda: wg.revoke(APPROVER, thread.proposal_id))
    assert too_late["code"] == "revoke_too_late" and refunds(thread.order) == 1
    events = [
        (r.user_id, r.event, r.status) for r in wg.audit(TENANT, proposal_id=thread.proposal_id)
    ]
    assert ("lead", "second_approval", "confirmed") in events
    assert ("clerk", "execute", "succeeded") in events


def test_the_approval_runs_the_write_once_and_the_thread_gets_its_receipt(wg: Writegate) -> None:
    thread = Thread(wg)
    approved = wg.approve_as_second(APPROVER, thread.proposal_id)
    assert refunds(thread.order) == 1  # run by the approval: the requester did nothing
    assert approved.status == "executed" and approved.outcome is not None
    assert approved.outcome["status"] == "succeeded"

    out = thread.confirm()  # the requester's thread, when it next runs, for any answer
    assert asked(out) == []  # not asked again
    receipt = last_tool(out)
    assert receipt["execution_id"] == approved.outcome["execution_id"]
    assert refunds(thread.order) == 1
    thread.confirm()
    assert refunds(thread.order) == 1  # a replayed resume runs nothing
    rows = wg.audit(TENANT, proposal_id=thread.proposal_id)
    (ran,) = [r for r in rows if (r.event, r.status) == ("execute", "succeeded")]
    assert (ran.user_id, ran.approver) == ("clerk", "lead")  # for the requester, by the lead


@pytest.mark.parametrize("way", sorted(WAYS))
@pytest.mark.parametrize("decision", ["approve", "decline", "revoke"])
def test_every_way_in_ends_the_same_way(wg: Writegate, way: str, decision: str) -> None:
    thread = Thread(wg, way=way)
    decide = {
        "approve": wg.approve_as_second,
        "decline": wg.decline_as_second,
        "revoke": wg.revoke,
    }[decision]
    decide(APPROVER, thread.proposal_id)
    out = thread.confirm()  # the thread's next run, whatever it is resumed with
    assert asked(out) == []
    told = last_tool(out)
    expected = {"approve": ("status", "succeeded"), "decline": ("code", "declined")}
    key, value = expected.get(decision, ("code", "revoked"))
    assert told[key] == value, told
    assert refunds(thread.order) == (1 if decision == "approve" else 0)


def test_an_approval_past_expiry_runs_nothing_and_the_thread_is_told(wg: Writegate) -> None:
    thread = Thread(wg)
    with psycopg.connect(wg.runtime.url, autocommit=True) as conn:  # its day has gone by
        conn.execute(EXPIRE_SQL, (thread.proposal_id,))
    assert refused(lambda: wg.approve_as_second(APPROVER, thread.proposal_id))["code"] == (
        "proposal_expired"
    )
    assert last_tool(thread.confirm())["code"] == "proposal_expired"
    assert refunds(thread.order) == 0

    unanswered = Thread(wg)  # nobody approved it in time: its thread is told on its next run
    with psycopg.connect(wg.runtime.url, autocommit=True) as conn:
        conn.execute(EXPIRE_SQL, (unanswered.proposal_id,))
    assert last_tool(unanswered.confirm())["code"] == "proposal_expired"
    assert refunds(unanswered.order) == 0


def test_who_may_not_approve_is_refused_and_nothing_runs(wg: Writegate) -> None:
    thread = Thread(wg)
    cases = {
        "self_approval": Identity("clerk", TENANT, frozenset({"approver"})),
        "not_found": Identity("lead", "tenant_other", frozenset({"approver"})),
        "forbidden": Identity("colleague", TENANT),
    }
    for code, who in cases.items():
        assert (
            refused(lambda who=who: wg.approve_as_second(who, thread.proposal_id))["code"] == code
        )
    assert refused(lambda: wg.awaiting_second_approval(cases["forbidden"]))["code"] == "forbidden"
    mine = wg.awaiting_second_approval(cases["self_approval"])
    assert thread.proposal_id not in {p.proposal_id for p in mine}  # never one's own
    assert wg.awaiting_second_approval(cases["not_found"]) == []  # nor another tenant's
    assert refused(lambda: wg.approve_as_second(APPROVER, "prop_nope"))["code"] == "not_found"
    assert refunds(thread.order) == 0
    rows = wg.audit(TENANT, proposal_id=thread.proposal_id)
    assert {r.error_code for r in rows if r.status == "rejected"} >= {"self_approval", "forbidden"}


def test_declined_by_the_second_approver_the_thread_is_told_and_nothing_runs(
    wg: Writegate,
) -> None:
    thread = Thread(wg)
    declined = wg.decline_as_second(APPROVER, thread.proposal_id)
    assert (declined.status, declined.decided_by) == ("declined", "lead")
    assert last_tool(thread.confirm())["code"] == "declined"
    assert refunds(thread.order) == 0
    assert refused(lambda: wg.approve_as_second(APPROVER, thread.proposal_id))["code"] == (
        "proposal_not_pending"
    )


def test_revoked_before_approval_the_thread_is_told_and_nothing_runs(wg: Writegate) -> None:
    thread = Thread(wg)
    revoked = wg.revoke(APPROVER, thread.proposal_id)
    assert (revoked.status, revoked.revoked_by) == ("revoked", "lead")
    assert refused(lambda: wg.approve_as_second(APPROVER, thread.proposal_id))["code"] == (
        "proposal_not_pending"
    )
    assert last_tool(thread.confirm())["code"] == "revoked"
    assert refunds(thread.order) == 0


def test_the_acting_person_is_an_identity_from_the_host(wg: Writegate) -> None:
    with pytest.raises(TypeError, match="Identity"):
        wg.approve_as_second({"user_id": "lead"}, "prop_x")  # type: ignore[arg-type]
    with pytest.raises(MissingIdentity):
        wg.revoke(Identity("", TENANT, frozenset({"approver"})), "prop_x")


def test_the_queue_pages_newest_or_oldest_first_never_the_approvers_own(wg: Writegate) -> None:
    tenant = f"tenant_{secrets.token_hex(4)}"
    clerk, lead = Identity("clerk", tenant), Identity("lead", tenant, frozenset({"approver"}))
    threads = [Thread(wg, clerk) for _ in range(5)]
    Thread(wg, lead)  # the approver's own request: never in their queue
    for order in ("oldest", "newest"):
        seen, cursor = [], None
        while True:
            page = wg.awaiting_second_approval(lead, limit=2, cursor=cursor, order=order)
            assert len(page) <= 2
            seen += [p.proposal_id for p in page]
            if (cursor := page.next_cursor) is None:
                break
        made = [t.proposal_id for t in threads]
        assert seen == (made if order == "oldest" else made[::-1])
    only = wg.awaiting_second_approval(
        lead, thread_id=threads[2].config["configurable"]["thread_id"]
    )
    assert [p.proposal_id for p in only] == [threads[2].proposal_id] and only.next_cursor is None
    assert wg.awaiting_second_approval(lead, tool_name="something_else") == []
    with pytest.raises(WritegateError) as refused:
        wg.awaiting_second_approval(lead, cursor=page.next_cursor or "bad")
    assert refused.value.to_dict()["code"] == "validation_failed"
