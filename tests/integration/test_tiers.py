"""Confirmation strength by risk, on PostgreSQL under the shipped policy.

Refunds of user_42's own orders: ¥199 is one click, ¥600 needs the amount re-typed,
¥6,000 needs a second approver, ¥60,000 also gets a 60-second token. Each tier is shown
with the confirmation that satisfies it and the ones that must not.
"""

from __future__ import annotations

import re
import secrets
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from langchain_core.messages import HumanMessage
from langgraph.types import Command
from typer.testing import CliRunner

from tests.integration.graph_helpers import config as graph_config
from tests.integration.graph_helpers import (
    only_interrupt,
    refund_call,
    scripted_graph,
    tool_content,
    tool_messages,
)
from tests.integration.tier_helpers import (
    APPROVER,
    REQUESTER,
    TENANT,
    PinnedClock,
    confirm,
    demo_policy_data,
    executor_under,
    new_order,
    open_runtime,
    policy_with,
    propose_refund,
    refund_args,
    refunds_of,
    server_now,
    token_of,
    tokens_of,
)
from writegate.__main__ import command
from writegate.approval import errors
from writegate.approval.decisions import Confirm
from writegate.approval.models import Identity, ProposalStatus
from writegate.approval.policy import parse_policy
from writegate.approval.service import ApprovalService, Confirmation
from writegate.demo.runtime import open_demo
from writegate.runtime.wiring import Runtime
from writegate.surfaces.cli.common import console

SELF_APPROVE_SQL = "UPDATE writegate.proposals SET second_approver = subject WHERE proposal_id = %s"


@pytest.fixture(scope="module")
def rt(create_database: Callable[[], str]) -> Iterator[Runtime]:
    with open_runtime(create_database) as runtime:
        yield runtime


def test_one_click_tier_needs_nothing_more(rt):
    order = new_order(rt, 19900)
    proposal = propose_refund(rt, order, 19900)
    block = proposal.preview["confirmation"]
    assert (proposal.tier, block["tier"], block["second_approver"]) == ("one_click",) * 2 + (False,)
    assert "retype_field" not in block and proposal.policy_version == rt.service.policy.version
    assert rt.executor.execute(REQUESTER, token_of(rt, proposal)).status == "succeeded"
    assert refunds_of(rt, order) == 1


def test_retype_tier_refuses_wrong_amounts_and_accepts_the_displayed_one(rt):
    order = new_order(rt, 60000)
    proposal = propose_refund(rt, order, 60000)
    block = proposal.preview["confirmation"]
    assert (block["tier"], block["retype_field"]) == ("retype", "amount_minor")
    assert "amount ¥600.00 (+1)" in block["reasons"]
    shown = {f["name"]: f["display"] for f in proposal.preview["fields"]}
    assert shown["amount_minor"] == "¥600.00"  # nothing hidden to make it "stronger"
    for wrong in (None, "", "¥6,000.00", "60000", "600.01", "600 600"):
        with pytest.raises(errors.RetypeMismatch):
            confirm(rt, proposal, wrong)
    assert tokens_of(rt, proposal.proposal_id) == 0
    assert rt.service.get_proposal(REQUESTER, proposal.proposal_id).status is (
        ProposalStatus.AWAITING
    )
    token = token_of(rt, proposal, "¥600.00")
    assert rt.executor.execute(REQUESTER, token).status == "succeeded"
    assert refunds_of(rt, order) == 1


def test_second_approver_tier_refuses_self_other_tenant_and_no_role(rt):
    order = new_order(rt, 600000)
    proposal = propose_refund(rt, order, 600000)
    assert proposal.preview["confirmation"]["second_approver"] is True
    waiting = confirm(rt, proposal, "6000")
    assert waiting.status is ProposalStatus.AWAITING_SECOND
    assert tokens_of(rt, proposal.proposal_id) == 0  # no token before the second approval
    assert confirm(rt, proposal).status is ProposalStatus.AWAITING_SECOND
    refused = [
        (replace(REQUESTER, roles=frozenset({"approver"})), errors.SelfApproval),
        (Identity("lead_9", "tenant_sh", frozenset({"approver"})), errors.NotFound),
        (Identity("user_7", TENANT), errors.Forbidden),
    ]
    for who, error in refused:
        with pytest.raises(error):
            rt.service.approve_as_second(who, proposal.proposal_id)
    assert tokens_of(rt, proposal.proposal_id) == 0
    seen = rt.service.proposal_for_review(APPROVER, proposal.proposal_id)
    assert seen.preview == proposal.preview and seen.args == proposal.args  # the same preview
    approved = rt.service.approve_as_second(APPROVER, proposal.proposal_id)
    assert (approved.status, approved.second_approver) == (ProposalStatus.CONFIRMED, "lead_1")
    assert refunds_of(rt, order) == 0
    token = token_of(rt, proposal)  # the requester's next confirm receives the token
    with pytest.raises(errors.SubjectMismatch):
        rt.executor.execute(APPROVER, token)
    assert rt.executor.execute(REQUESTER, token).status == "succeeded"
    assert refunds_of(rt, order) == 1
    audit = list(rt.store.audit_rows(TENANT, proposal_id=proposal.proposal_id))
    assert [(r["event"], r["status"]) for r in audit if r["approver"] == "lead_1"] == [
        ("second_approval", "confirmed"),
        ("execute", "succeeded"),  # the run names the approval that let it run
    ]


def test_the_database_refuses_a_requester_approving_their_own_request(rt):
    proposal = propose_refund(rt, new_order(rt, 600000), 600000)
    with rt.pool.connection() as conn, pytest.raises(psycopg.errors.CheckViolation):
        conn.execute(SELF_APPROVE_SQL, (proposal.proposal_id,))


def test_highest_tier_token_lives_sixty_seconds_on_the_server_clock(rt):
    clock = PinnedClock()
    pinned = open_demo(rt.url, setup=False, clock=clock).runtime
    try:
        order = new_order(pinned, 6000000)
        clock.at = server_now(pinned)
        proposal = propose_refund(pinned, order, 6000000)
        assert proposal.tier == "second_approver_short"
        assert proposal.preview["confirmation"]["token_ttl_seconds"] == 60
        confirm(pinned, proposal, "¥60,000.00")
        pinned.service.approve_as_second(APPROVER, proposal.proposal_id)
        clock.at += timedelta(minutes=3)  # the requester comes back later: still fine
        confirmation = confirm(pinned, proposal)
        assert isinstance(confirmation, Confirmation)
        assert confirmation.expires_at == clock.at + timedelta(seconds=60)
        clock.at = confirmation.expires_at
        with pytest.raises(errors.TokenExpired):
            pinned.executor.execute(REQUESTER, confirmation.token)
        assert refunds_of(pinned, order) == 0
        clock.at = confirmation.expires_at - timedelta(microseconds=1)
        assert pinned.executor.execute(REQUESTER, confirmation.token).status == "succeeded"
    finally:
        pinned.close()


def test_policy_change_that_keeps_the_tier_still_executes(rt):
    order = new_order(rt, 19900)
    token = token_of(rt, propose_refund(rt, order, 19900))
    newer = policy_with("2026-09-02.1", second_approver_short=9)
    assert executor_under(rt, newer).execute(REQUESTER, token).status == "succeeded"
    assert refunds_of(rt, order) == 1


def test_policy_change_that_changes_the_tier_refuses_the_old_token(rt):
    order = new_order(rt, 19900)
    proposal = propose_refund(rt, order, 19900)
    token = token_of(rt, proposal)
    stricter = policy_with("2026-09-02.2", retype=3)  # ¥199 refunds now need a re-type
    with pytest.raises(errors.PolicyChanged) as caught:
        executor_under(rt, stricter).execute(REQUESTER, token)
    assert caught.value.details["token_policy"] == proposal.policy_version
    assert refunds_of(rt, order) == 0 and tokens_of(rt, proposal.proposal_id) == 1


def test_a_stricter_file_under_the_same_version_string_still_re_judges_the_old_token(rt):
    order = new_order(rt, 19900)
    proposal = propose_refund(rt, order, 19900)
    token = token_of(rt, proposal)
    unchanged_label = demo_policy_data()["version"]  # someone forgot to bump it
    stricter = policy_with(unchanged_label, retype=3)
    with pytest.raises(errors.PolicyChanged):
        executor_under(rt, stricter).execute(REQUESTER, token)
    assert refunds_of(rt, order) == 0
    same_rules = policy_with(unchanged_label)
    assert executor_under(rt, same_rules).execute(REQUESTER, token).status == "succeeded"
    assert refunds_of(rt, order) == 1


# -- revocation ------------------------------------------------------------------------


def test_revocation_before_execution_is_refused_as_revoked_and_nothing_runs(rt):
    order = new_order(rt, 19900)
    proposal = propose_refund(rt, order, 19900)
    token = token_of(rt, proposal)
    with pytest.raises(errors.NotFound):  # a colleague without a role sees nothing
        rt.service.revoke(Identity("user_7", TENANT), proposal.proposal_id)
    with pytest.raises(errors.NotFound):  # nor does an approver of another tenant
        rt.service.revoke(Identity("lead_9", "tenant_sh", frozenset({"approver"})),
                          proposal.proposal_id)  # fmt: skip
    revoked = rt.service.revoke(APPROVER, proposal.proposal_id)
    assert (revoked.status, revoked.revoked_by) == (ProposalStatus.REVOKED, "lead_1")
    with pytest.raises(errors.Revoked):
        rt.executor.execute(REQUESTER, token)
    with pytest.raises(errors.ProposalNotPending):  # and it cannot be confirmed back
        confirm(rt, proposal)
    assert refunds_of(rt, order) == 0


def test_revocation_after_execution_started_reports_it_and_undoes_nothing(rt):
    order = new_order(rt, 19900)
    proposal = propose_refund(rt, order, 19900)
    token = token_of(rt, proposal)
    late: list[errors.WritegateError] = []

    def revoke_when(step: str) -> None:
        if step == "claimed":  # the token is consumed and the request key claimed
            with pytest.raises(errors.RevokeTooLate) as caught:
                rt.service.revoke(APPROVER, proposal.proposal_id)
            late.append(caught.value)

    runtime = open_demo(rt.url, setup=False, step_hook=revoke_when).runtime
    try:
        assert runtime.executor.execute(REQUESTER, token).status == "succeeded"
    finally:
        runtime.close()
    assert late and late[0].details["execution_state"] == "running"
    assert late[0].details["execution_id"]
    assert refunds_of(rt, order) == 1
    current = rt.service.get_proposal(REQUESTER, proposal.proposal_id)
    assert current.status is ProposalStatus.EXECUTED and current.revoked_by is None
    with pytest.raises(errors.RevokeTooLate) as after:
        rt.service.revoke(REQUESTER, proposal.proposal_id)
    assert after.value.details["execution_state"] == "succeeded"


def race_revoke_and_execute(rt: Runtime, token: str, proposal_id: str) -> dict[str, str]:
    """Execute and revoke at the same instant, each on its own connection."""
    barrier, outcomes = threading.Barrier(2), {}
    calls = {
        "execute": lambda: rt.executor.execute(REQUESTER, token),
        "revoke": lambda: rt.service.revoke(APPROVER, proposal_id),
    }

    def run(name: str) -> None:
        barrier.wait()
        try:
            calls[name]()
            outcomes[name] = "ok"
        except errors.WritegateError as exc:
            outcomes[name] = exc.code

    threads = [threading.Thread(target=run, args=(name,)) for name in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


def test_revocation_racing_execution_has_one_winner(rt):
    for _ in range(5):
        order = new_order(rt, 19900)
        proposal = propose_refund(rt, order, 19900)
        outcomes = race_revoke_and_execute(rt, token_of(rt, proposal), proposal.proposal_id)
        assert outcomes in (
            {"execute": "ok", "revoke": "revoke_too_late"},
            {"execute": "revoked", "revoke": "ok"},
        ), outcomes
        assert refunds_of(rt, order) == (1 if outcomes["execute"] == "ok" else 0)


# -- the console -----------------------------------------------------------------------


def run_cli(rt: Runtime, *args: str, stdin: str | None = None) -> Any:
    result = CliRunner().invoke(command(), list(args), input=stdin, env={"DATABASE_URL": rt.url})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result


def test_console_shows_the_same_preview_then_approves_and_revokes(rt, monkeypatch):
    monkeypatch.setattr(console, "width", 200)  # ids stay on one line in tables
    order = new_order(rt, 600000)
    proposal = propose_refund(rt, order, 600000)
    confirm(rt, proposal, "¥6,000.00")
    me = ("--user", "lead_1", "--tenant", TENANT)
    listed = run_cli(rt, "approvals", *me)
    assert proposal.proposal_id in listed.output
    refused = run_cli(rt, "approve", proposal.proposal_id, "--user", "user_42", "--tenant", TENANT)
    assert refused.exit_code == 1 and "self_approval" in refused.output
    undecided = run_cli(rt, "approve", proposal.proposal_id, *me, stdin="n\n")
    assert undecided.exit_code == 1 and "¥6,000.00" in undecided.output
    assert "second_approver" in undecided.output and "amount ¥6,000.00 (+3)" in undecided.output
    approved = run_cli(rt, "approve", proposal.proposal_id, *me, stdin="y\n")
    assert approved.exit_code == 0, approved.output
    assert "executed" in approved.output and '"status": "succeeded"' in approved.output
    assert rt.service.get_proposal(REQUESTER, proposal.proposal_id).second_approver == "lead_1"
    assert refunds_of(rt, order) == 1  # the approval ran it
    too_late = run_cli(rt, "revoke", proposal.proposal_id, *me)
    assert too_late.exit_code == 1 and "revoke_too_late" in too_late.output
    assert refunds_of(rt, order) == 1


def test_an_approval_whose_write_is_refused_stands_and_runs_nothing(rt):
    order = new_order(rt, 600000)
    proposal = propose_refund(rt, order, 600000)
    confirm(rt, proposal, "¥6,000.00")
    with rt.pool.connection() as conn:  # the order moves while the approver thinks
        conn.execute("UPDATE orders SET version = version + 1 WHERE order_id = %s", (order,))
    approved = rt.executor.approve_as_second(APPROVER, proposal.proposal_id)
    assert approved.outcome_body()["code"] == "state_changed"
    assert (approved.proposal.status, approved.proposal.second_approver) == (
        ProposalStatus.CONFIRMED,
        "lead_1",
    )  # the approval stands; only the claim was undone
    assert refunds_of(rt, order) == 0
    with pytest.raises(errors.StateChanged):  # the requester's thread is told the same
        rt.executor.confirm(REQUESTER, Confirm(action="confirm", proposal_id=proposal.proposal_id))
    assert refunds_of(rt, order) == 0


def test_threads_lists_a_proposal_that_awaits_its_second_approver(rt, monkeypatch):
    monkeypatch.setattr(console, "width", 200)  # ids stay on one line in tables
    proposal = propose_refund(rt, new_order(rt, 600000), 600000)
    confirm(rt, proposal, "¥6,000.00")  # confirmed by the requester: a second approver is next
    assert rt.service.get_proposal(REQUESTER, proposal.proposal_id).status.value == (
        "awaiting_second_approval"
    )
    listed = run_cli(rt, "threads", "--user", REQUESTER.user_id, "--tenant", TENANT)
    assert listed.exit_code == 0, listed.output
    assert proposal.proposal_id in listed.output
    assert "awaiting_second_approval" in listed.output


# -- the graph -------------------------------------------------------------------------


def graph_refund(rt: Runtime, amount: int) -> tuple[Any, dict[str, Any], str, Any]:
    """A thread where the model proposes a refund of `amount`; up to its first question."""
    order = new_order(rt, amount)
    graph = scripted_graph(rt, [refund_call(order, amount)], "done")
    cfg = graph_config("tiers-" + secrets.token_hex(4))
    asked = only_interrupt(graph.invoke({"messages": [HumanMessage("refund")]}, cfg))
    return graph, cfg, order, asked


def test_graph_second_approver_flow_interrupts_again_then_runs_once(rt):
    graph, cfg, order, asked = graph_refund(rt, 600000)
    proposal_id = asked.value["proposal_id"]
    assert asked.value["preview"]["confirmation"]["tier"] == "second_approver"
    answer = {"action": "confirm", "proposal_id": proposal_id, "retyped": "6,000.00"}
    waiting = only_interrupt(graph.invoke(Command(resume=answer), cfg))
    assert waiting.value["awaiting"]["what"] == "second_approval"
    assert waiting.value["proposal_id"] == proposal_id and refunds_of(rt, order) == 0
    again = only_interrupt(graph.invoke(Command(resume=answer), cfg))  # not approved yet
    assert again.value["awaiting"]["what"] == "second_approval" and refunds_of(rt, order) == 0
    rt.service.approve_as_second(APPROVER, proposal_id)  # out of band, e.g. `writegate approve`
    out = graph.invoke(Command(resume={"action": "confirm", "proposal_id": proposal_id}), cfg)
    [message] = tool_messages(out)
    assert tool_content(message)["status"] == "succeeded" and refunds_of(rt, order) == 1
    out = graph.invoke(Command(resume={"action": "confirm", "proposal_id": proposal_id}), cfg)
    assert refunds_of(rt, order) == 1  # a replayed resume runs nothing


def test_graph_tells_the_model_when_the_approval_was_revoked(rt):
    graph, cfg, order, asked = graph_refund(rt, 600000)
    proposal_id = asked.value["proposal_id"]
    answer = {"action": "confirm", "proposal_id": proposal_id, "retyped": "¥6,000.00"}
    only_interrupt(graph.invoke(Command(resume=answer), cfg))
    rt.service.approve_as_second(APPROVER, proposal_id)
    rt.service.revoke(APPROVER, proposal_id)
    out = graph.invoke(Command(resume={"action": "confirm", "proposal_id": proposal_id}), cfg)
    [message] = tool_messages(out)
    assert tool_content(message)["code"] == "revoked" and refunds_of(rt, order) == 0


def test_graph_retype_refusal_keeps_the_question_and_low_trust_raises_the_tier(rt):
    graph, cfg, order, asked = graph_refund(rt, 19900)
    assert asked.value["preview"]["confirmation"]["tier"] == "one_click"
    order = new_order(rt, 19900)
    graph = scripted_graph(rt, [refund_call(order, 19900)], "done")
    cfg = graph_config("tiers-" + secrets.token_hex(4))
    cfg["configurable"]["trust"] = "low"  # from the host's session, never from the model
    asked = only_interrupt(graph.invoke({"messages": [HumanMessage("refund")]}, cfg))
    assert asked.value["preview"]["confirmation"]["tier"] == "retype"
    wrong = {"action": "confirm", "proposal_id": asked.value["proposal_id"], "retyped": "19900"}
    refused = only_interrupt(graph.invoke(Command(resume=wrong), cfg))
    assert refused.value["error"]["code"] == "retype_mismatch" and refunds_of(rt, order) == 0
    right = {**wrong, "retyped": "¥199.00"}
    out = graph.invoke(Command(resume=right), cfg)
    assert tool_content(tool_messages(out)[0])["status"] == "succeeded"
    assert refunds_of(rt, order) == 1


def test_a_tier_can_give_its_proposals_a_longer_time_to_live(rt):
    data = demo_policy_data()
    data["version"] = "ttl-" + secrets.token_hex(3)
    for tier in data["tiers"]:
        if tier["name"] == "second_approver":
            tier["proposal_ttl_seconds"] = 86400  # a second approver may take a day
    policy = parse_policy(data)
    service = ApprovalService(rt.store, rt.registry, policy)
    small = service.propose(REQUESTER, thread_id="th_ttl1", tool_call_id="c1",
                            tool_name="refund_order",
                            raw_args=refund_args(new_order(rt, 19900), 19900))  # fmt: skip
    large = service.propose(REQUESTER, thread_id="th_ttl2", tool_call_id="c2",
                            tool_name="refund_order",
                            raw_args=refund_args(new_order(rt, 600000), 600000))  # fmt: skip
    assert (small.tier, large.tier) == ("one_click", "second_approver")
    assert small.expires_at - small.created_at == timedelta(seconds=900)
    assert large.expires_at - large.created_at == timedelta(days=1)
    assert large.preview["confirmation"]["proposal_ttl_seconds"] == 86400


def test_an_unknown_key_in_a_tier_is_still_refused():
    data = demo_policy_data()
    data["tiers"][0]["proposal_ttl"] = 60
    with pytest.raises(ValueError, match="proposal_ttl"):
        parse_policy(data)


def test_the_console_queue_pages_and_prints_the_next_cursor(rt, monkeypatch):
    monkeypatch.setattr(console, "width", 400)  # a cursor stays on one line
    tenant = "tenant_" + secrets.token_hex(4)
    requester = Identity("clerk", tenant)
    made = []
    for _ in range(3):
        proposal = propose_refund(rt, new_order(rt, 600000, requester), 600000, requester)
        confirm(rt, proposal, "¥6,000.00", requester)
        made.append(proposal.proposal_id)
    me = ("--user", "lead_1", "--tenant", tenant, "--limit", "2")
    first = run_cli(rt, "approvals", *me)
    assert first.exit_code == 0, first.output
    assert made[0] in first.output and made[1] in first.output and made[2] not in first.output
    (cursor,) = re.findall(r"next page: --cursor (\S+)", first.output)
    second = run_cli(rt, "approvals", *me, "--cursor", cursor)
    assert made[2] in second.output and made[0] not in second.output
    assert "last page" in second.output
    newest = run_cli(rt, "approvals", *me, "--order", "newest")
    assert made[2] in newest.output and made[0] not in newest.output
    wrong = run_cli(rt, "approvals", *me, "--cursor", cursor, "--order", "newest")
    assert wrong.exit_code == 1 and "validation_failed" in wrong.output
