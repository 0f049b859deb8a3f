"""LangChain's answer shape: what it may decide, and how its edit form's strings are read."""

from __future__ import annotations

from typing import Any

import pytest

from writegate.approval.decisions import Confirm, Edit, parse_decision
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


@pytest.mark.parametrize("kind", ["respond", "response", "ignore", "accept", None])
def test_an_unsupported_decision_type_names_the_supported_ones(kind: str | None) -> None:
    with pytest.raises(InvalidDecision) as refused:
        _parse({"decisions": [{"type": kind, "args": "text"}]})
    assert "approve, edit, reject" in refused.value.message
