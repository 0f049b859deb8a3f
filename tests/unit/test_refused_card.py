"""The card Agent Chat UI draws from `action_requests[0]`: a refused answer up front, the
tool's fields in one order on every question, and the refusal field never read as an
argument when the card's edit form sends it back."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from writegate.approval.errors import ValidationFailed
from writegate.approval.models import Proposal, ProposalStatus
from writegate.approval.wire import REFUSAL_FIELD, approval_request, without_refusal_field

REFUSED = ValidationFailed("amount_minor: Input should be a valid integer")


def proposal(args: dict[str, Any]) -> Proposal:
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    fields = [
        {"name": "order_id", "value": "ord_1", "display": "ord_1", "label": "Order"},
        {"name": "amount_minor", "value": 19900, "display": "¥199.00", "label": "Amount"},
        {"name": "balance_after", "value": 0, "display": "¥0.00"},  # shown, not an argument
    ]
    return Proposal(
        proposal_id="prop_1", thread_id="t", tool_call_id="call_1", subject="u",
        tenant_id="t", operation="refund", resource="ord_1", args=args,
        args_digest="sha256:0", fingerprint="sha256:0", state_version=1,
        preview={"title": "Refund order ord_1", "fields": fields}, policy_version="p",
        request_key="k", status=ProposalStatus.AWAITING, created_at=now, expires_at=now,
    )  # fmt: skip


def test_args_follow_the_preview_then_the_rest_by_name_whatever_the_stored_order() -> None:
    as_proposed = {"order_id": "ord_1", "amount_minor": 19900, "scope": 2, "note": "x"}
    as_stored = {"note": "x", "scope": 2, "order_id": "ord_1", "amount_minor": 19900}  # JSONB
    for args in (as_proposed, as_stored):
        value = approval_request(proposal(args))
        assert list(value["args"]) == ["order_id", "amount_minor", "note", "scope"]
        assert list(value["action_requests"][0]["args"]) == list(value["args"])


def test_a_refused_answer_is_the_cards_last_field_with_what_approve_runs() -> None:
    value = approval_request(proposal({"order_id": "ord_1", "amount_minor": 19900}), REFUSED)
    card = value["action_requests"][0]["args"]
    assert list(card) == ["order_id", "amount_minor", REFUSAL_FIELD]  # above Approve
    assert card[REFUSAL_FIELD].startswith(f"{REFUSED.message} (validation_failed).")
    assert (
        "Approve runs exactly this: Refund order ord_1 (Order ord_1, Amount ¥199.00"
        in (card[REFUSAL_FIELD])
    )
    assert list(value["args"]) == ["order_id", "amount_minor"]  # the proposal's args only
    assert value["error"]["code"] == "validation_failed"


def test_the_refusal_field_sent_back_by_the_edit_form_is_dropped() -> None:
    edit = {"type": "edit", "edited_action": {"name": "refund", "args": {}}}
    edit["edited_action"]["args"] = {REFUSAL_FIELD: "…", "order_id": "ord_1", "amount_minor": "1"}
    answer = without_refusal_field({"decisions": [edit]}, {"order_id": "ord_1"})
    assert answer["decisions"][0]["edited_action"]["args"] == {
        "order_id": "ord_1",
        "amount_minor": "1",
    }
    writegate_event = {"action": "edit", "proposal_id": "p", "args": {REFUSAL_FIELD: "x"}}
    assert without_refusal_field(writegate_event, {}) == writegate_event  # strict, as sent


def test_a_tool_argument_of_that_name_is_left_alone() -> None:
    args = {"order_id": "ord_1", REFUSAL_FIELD: "a real argument"}
    card = approval_request(proposal(args), REFUSED)["action_requests"][0]["args"]
    assert card[REFUSAL_FIELD] == "a real argument"
    sent = {"decisions": [{"type": "edit", "edited_action": {"name": "refund", "args": args}}]}
    assert without_refusal_field(sent, args) == sent
