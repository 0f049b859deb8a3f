"""The audit trail, read through the public API only: `wg.audit(tenant_id, ...)` gives
typed, frozen rows of one tenant, never another's, oldest first."""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.types import Command

from tests.integration.library_helpers import (
    TENANT,
    asked,
    balance,
    confirm,
    hand_built,
    last_tool,
    new_account,
    pay,
    payments,
    run_config,
    scripted,
    tool_call,
)
from writegate import AuditRow, ValidationFailed, Writegate


@pytest.fixture(scope="module")
def wg(create_database: Callable[[], str]) -> Iterator[Writegate]:
    with Writegate.open(create_database(), tools=[pay, balance]) as gate:
        yield gate


def paid_thread(wg: Writegate) -> tuple[str, Any]:
    """A thread that read a balance, then paid once: its id, and the question asked."""
    account, thread_id = new_account(), f"audit_{secrets.token_hex(5)}"
    read, write = tool_call("balance", account=account), tool_call("pay", account=account, cents=7)
    graph = hand_built(wg, scripted([read], [write], "paid"))
    config = run_config(thread_id)
    (question,) = asked(graph.invoke({"messages": [HumanMessage("pay")]}, config))
    out = graph.invoke(Command(resume=confirm(question)), config)
    assert last_tool(out)["status"] == "succeeded" and payments(account) == 1
    return thread_id, question


def test_a_threads_rows_are_typed_in_order_with_equal_digests(wg: Writegate) -> None:
    thread_id, question = paid_thread(wg)
    rows = wg.audit(TENANT, thread_id=thread_id)
    assert all(isinstance(row, AuditRow) for row in rows)
    assert [(r.tool_name, r.event, r.status) for r in rows] == [
        ("balance", "read", "succeeded"),
        ("pay", "propose", "awaiting_confirmation"),
        ("pay", "decide", "confirmed"),
        ("pay", "execute", "succeeded"),
    ]
    execute = rows[-1]
    digest = question.value["args_digest"]
    assert (execute.requested_digest, execute.approved_digest, execute.executed_digest) == (
        digest,
        digest,
        digest,
    )
    assert execute.proposal_id == question.value["proposal_id"]
    assert execute.request_key is not None and execute.request_key.startswith("pay:")
    # The decision's row and the execution's both name who confirmed it.
    assert rows[2].approver == "user_lib" and execute.approver == "user_lib"
    assert execute.result is not None
    assert isinstance(execute.created_at, datetime) and execute.created_at.tzinfo is not None
    assert [r.audit_id for r in rows] == sorted(r.audit_id for r in rows)
    with pytest.raises(dataclasses.FrozenInstanceError):
        execute.status = "forged"  # type: ignore[misc]


def test_rows_are_filtered_by_proposal_and_limited(wg: Writegate) -> None:
    thread_id, question = paid_thread(wg)
    proposal_id = question.value["proposal_id"]
    rows = wg.audit(TENANT, proposal_id=proposal_id)
    assert [r.event for r in rows] == ["propose", "decide", "execute"]
    assert {r.proposal_id for r in rows} == {proposal_id}
    first_two = wg.audit(TENANT, thread_id=thread_id, limit=2)
    assert [r.event for r in first_two] == ["read", "propose"]


def test_another_tenant_reads_nothing_of_this_one(wg: Writegate) -> None:
    thread_id, question = paid_thread(wg)
    assert wg.audit("tenant_other", thread_id=thread_id) == []
    assert wg.audit("tenant_other", proposal_id=question.value["proposal_id"]) == []
    assert all(r.tenant_id == TENANT for r in wg.audit(TENANT))


@pytest.mark.parametrize(
    ("tenant_id", "options"),
    [("", {}), ("  ", {}), (None, {}), (TENANT, {"limit": 0}), (TENANT, {"limit": "5"})],
    ids=["empty", "blank", "none", "limit_zero", "limit_text"],
)
def test_a_missing_tenant_or_a_bad_limit_is_a_structured_error(
    wg: Writegate, tenant_id: Any, options: dict[str, Any]
) -> None:
    with pytest.raises(ValidationFailed) as refused:
        wg.audit(tenant_id, **options)
    body = refused.value.to_dict()
    assert body["code"] == "validation_failed" and body["retryable"] is False


def test_a_replayed_confirmation_is_audited_in_its_thread(wg: Writegate) -> None:
    account, thread_id = new_account(), f"audit_{secrets.token_hex(5)}"
    model = scripted([tool_call("pay", account=account, cents=300)], "paid", "paid, still")
    agent, config = wg.build_agent(model), run_config(thread_id)
    (question,) = asked(agent.invoke({"messages": [HumanMessage("pay")]}, config))
    checkpoint = agent.get_state(config).config["configurable"]
    asking = {"configurable": {**config["configurable"], **checkpoint}}
    first = last_tool(agent.invoke(Command(resume=confirm(question)), config))
    # The checkpoint that asked is resumed again: the write node re-runs from its start.
    again = last_tool(agent.invoke(Command(resume=confirm(question)), asking))
    assert again["execution_id"] == first["execution_id"] and payments(account) == 1
    (duplicate,) = [
        r for r in wg.audit(TENANT, proposal_id=question.value["proposal_id"])
        if r.status == "duplicate"
    ]  # fmt: skip
    assert duplicate.thread_id == thread_id
    assert duplicate in wg.audit(TENANT, thread_id=thread_id)
