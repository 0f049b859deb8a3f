"""LangChain's answer shape: what it may decide, and how its edit form's strings are read."""

from __future__ import annotations

from typing import Any

import pytest

from writegate.approval.decisions import Cancel, Confirm, Decline, Edit, parse_decision
from writegate.approval.errors import InvalidDecision

SCHEMA: dict[str, Any] = {
    "properties": {
        "order_id": {"type": "string"},
        "amount_minor": {"type": "integer"},
        "notify": {"type": "boolean"},
        "status": {"type": "string", "enum": ["open", "closed"]},
        "level": {"enum": [1, 2]},
        "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
    }
}


def _edit(args: dict[str, Any]) -> dict[str, Any]:
    return {"decisions": [{"type": "edit", "edited_action": {"name": "op", "args": args}}]}


def _parse(value: Any, *, shown: bool = True) -> Any:
    return parse_decision(
        value, asked_proposal_id="p1", presented=lambda: shown, arg_schema=lambda: SCHEMA
    )


@pytest.mark.parametrize(
    ("sent", "read"),
    [
        ({"amount_minor": "1000"}, {"amount_minor": 1000}),
        ({"amount_minor": "0"}, {"amount_minor": 0}),
        ({"amount_minor": "-5"}, {"amount_minor": -5}),
        ({"notify": "true", "status": "closed"}, {"notify": True, "status": "closed"}),
        ({"notify": "false", "level": "2"}, {"notify": False, "level": 2}),
        ({"limit": "30"}, {"limit": 30}),
        ({"order_id": "1000"}, {"order_id": "1000"}),  # a string field keeps its text
    ],
)
def test_edit_form_strings_in_canonical_text_are_read_as_their_field(
    sent: dict[str, Any], read: dict[str, Any]
) -> None:
    decision = _parse(_edit(sent))
    assert isinstance(decision, Edit) and decision.args == read


@pytest.mark.parametrize(
    "text", ["01000", "+1000", " 1000", "1000 ", "1e3", "1000.0", "1_000", "-0", "", "１０００"]
)
def test_edit_form_strings_not_in_canonical_text_stay_strings(text: str) -> None:
    decision = _parse(_edit({"amount_minor": text, "notify": "True"}))
    assert isinstance(decision, Edit)
    assert decision.args == {"amount_minor": text, "notify": "True"}


def test_unnamed_answer_before_its_question_was_shown_is_refused() -> None:
    with pytest.raises(InvalidDecision) as refused:
        _parse({"decisions": [{"type": "approve"}]}, shown=False)
    assert refused.value.details["reason"] == "not_presented"
    named = {"decisions": [{"type": "approve", "proposal_id": "p1"}]}
    assert isinstance(_parse(named, shown=False), Confirm)


@pytest.mark.parametrize(
    "value",
    [
        {"decisions": [{"type": "approve", "proposal_id": "p2"}]},
        {"decisions": [{"type": "approve"}], "proposal_id": "p2"},
        {"decisions": [{"type": "approve", "proposal_id": "p1"}], "proposal_id": "p2"},
    ],
)
def test_an_answer_naming_another_proposal_is_refused(value: dict[str, Any]) -> None:
    with pytest.raises(InvalidDecision) as refused:
        _parse(value)
    assert refused.value.details["received_proposal_id"] == "p2"


@pytest.mark.parametrize("kind", ["respond", "reply", None])
def test_an_unsupported_decision_type_names_the_supported_ones(kind: str | None) -> None:
    with pytest.raises(InvalidDecision) as refused:
        _parse({"decisions": [{"type": kind, "args": "text"}]})
    assert "approve, edit, reject" in refused.value.message
    assert "accept, edit, response, ignore" in refused.value.message


INBOX_ANSWERS = [
    ({"type": "accept", "args": None}, Confirm(action="confirm", proposal_id="p1")),
    (
        {"type": "response", "args": "wrong order"},
        Decline(action="decline", proposal_id="p1", reason="wrong order"),
    ),
    ({"type": "ignore", "args": None}, Cancel(action="cancel", proposal_id="p1")),
    (
        {"type": "edit", "args": {"action": "op", "args": {"amount_minor": "500"}}},
        Edit(action="edit", proposal_id="p1", args={"amount_minor": 500}),
    ),
]


@pytest.mark.parametrize(("item", "decision"), INBOX_ANSWERS, ids=lambda v: str(v)[:20])
def test_agent_inbox_answers_as_a_list_or_inside_decisions(item: Any, decision: Any) -> None:
    assert _parse_inbox([item]) == decision
    assert _parse_inbox({"decisions": [item]}) == decision


def _parse_inbox(value: Any) -> Any:
    return parse_decision(
        value,
        asked_proposal_id="p1",
        presented=lambda: True,
        arg_schema=lambda: SCHEMA,
        operation="op",
    )


def test_agent_inbox_accept_carrying_its_card_confirms_the_stored_proposal() -> None:
    card = {"action": "op", "args": {"amount_minor": "1"}}
    assert _parse_inbox([{"type": "accept", "args": card}]) == INBOX_ANSWERS[0][1]


@pytest.mark.parametrize(
    "value",
    [
        [{"type": "response", "args": ""}],
        [{"type": "response", "args": {"text": "x"}}],
        [{"type": "edit", "args": {"action": "other_op", "args": {}}}],
        [{"type": "edit", "args": {"amount_minor": "1"}}],
        [{"type": "accept"}, {"type": "accept"}],
        [],
        ["accept"],
    ],
)
def test_any_other_list_is_refused_naming_the_accepted_shapes(value: Any) -> None:
    with pytest.raises(InvalidDecision) as refused:
        _parse_inbox(value)
    assert '{"type": "accept", "args": null}' in refused.value.message
    assert '{"decisions": [{"type": "approve"}]}' in refused.value.message


def test_an_unnamed_inbox_answer_before_its_question_was_shown_is_refused() -> None:
    with pytest.raises(InvalidDecision) as refused:
        _parse([{"type": "accept", "args": None}], shown=False)
    assert refused.value.details["reason"] == "not_presented"
