"""A second approver's answer on the requester's thread (graph/second.py): approve or
decline, read as every answer is; anything else, and any run that is more than an
answer, refused before it decides anything."""

from __future__ import annotations

from typing import Any

import pytest

from writegate import second_approval_run
from writegate.approval.conversation import second_decision
from writegate.approval.decisions import Confirm, Decline
from writegate.approval.errors import InvalidDecision

PID = "prp_1"


@pytest.mark.parametrize(
    "answer",
    [
        [{"type": "accept", "args": None}],
        {"decisions": [{"type": "approve"}]},
        {"action": "confirm", "proposal_id": PID},
    ],
)
def test_an_approval_in_each_shape_approves(answer: Any) -> None:
    assert isinstance(second_decision(answer, PID), Confirm)


def test_a_response_declines_with_the_approvers_words() -> None:
    decision = second_decision([{"type": "response", "args": "no receipt"}], PID)
    assert isinstance(decision, Decline) and decision.reason == "no receipt"


@pytest.mark.parametrize(
    "answer",
    [
        [{"type": "edit", "args": {"action": "refund_order", "args": {"amount_minor": 1}}}],
        [{"type": "ignore", "args": None}],
        {"action": "cancel", "proposal_id": PID},
        {"action": "confirm", "proposal_id": "prp_other"},
        [{"type": "accept", "args": None}, {"type": "accept", "args": None}],
        "yes",
    ],
)
def test_anything_else_is_refused(answer: Any) -> None:
    with pytest.raises(InvalidDecision):
        second_decision(answer, PID)


ACCEPT = {"resume": [{"type": "accept", "args": None}]}


def test_a_run_that_only_answers_passes() -> None:
    second_approval_run({"command": ACCEPT, "input": None, "config": {}}, PID)


@pytest.mark.parametrize(
    "run",
    [
        {"input": {"messages": [{"role": "user", "content": "hi"}]}},
        {"command": {**ACCEPT, "goto": "__end__"}},
        {"command": {"update": {"messages": []}}},
        {"command": ACCEPT, "input": {"messages": []}},
        {"command": ACCEPT, "webhook": "https://example.invalid/hook"},
        {"command": ACCEPT, "interrupt_before": ["agent"]},
        {"command": ACCEPT, "config": {"configurable": {"checkpoint_id": "1ef"}}},
    ],
)
def test_a_run_that_does_more_than_answer_is_refused(run: dict[str, Any]) -> None:
    with pytest.raises(InvalidDecision):
        second_approval_run(run, PID)
