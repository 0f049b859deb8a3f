"""The conversation's rules are the protocol's, free of any framework: the ones that need
no ledger are read here; the gate, the middleware, the HTTP service and MCP run the rest
in their integration tests."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime

from writegate.approval.conversation import (
    AWAITING_SECOND_NOTE,
    Ask,
    Over,
    approved_by_second,
    awaiting_second,
    ends_question,
    latest,
)
from writegate.approval.errors import (
    AlreadyConsumed,
    InvalidDecision,
    PolicyChanged,
    ProposalExpired,
    ProposalNotPending,
    RetypeMismatch,
    StateChanged,
)
from writegate.approval.models import Proposal, ProposalStatus

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
FRAMEWORKS = ("langgraph", "langchain", "langchain_core", "mcp", "fastapi", "starlette")


def proposal(pid: str = "prop_1", **changes: object) -> Proposal:
    made = Proposal(
        proposal_id=pid, thread_id="t", tool_call_id="call_1", subject="u", tenant_id="acme",
        operation="send_email", resource="r", args={}, args_digest="sha256:0",
        fingerprint="sha256:0", state_version=1, preview={}, policy_version="p",
        request_key="k", status=ProposalStatus.AWAITING, created_at=NOW, expires_at=NOW,
    )  # fmt: skip
    return replace(made, **changes)  # type: ignore[arg-type]


def test_the_conversations_rules_load_no_framework() -> None:
    probe = (
        "import sys, writegate.approval.conversation\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {FRAMEWORKS!r}))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_refusals_that_end_the_question_and_those_that_ask_it_again() -> None:
    for final in (ProposalExpired(), ProposalNotPending(), AlreadyConsumed(), PolicyChanged()):
        assert ends_question(final), final.code
    for again in (InvalidDecision("free text"), RetypeMismatch(), StateChanged()):
        assert not ends_question(again), again.code


def test_a_confirm_answered_twice_reports_the_first_receipt() -> None:
    first = {"status": "succeeded", "execution_id": "exe_1"}
    assert Over(AlreadyConsumed(receipt=first)).first_receipt == first
    assert Over(AlreadyConsumed()).first_receipt is None
    assert Over(ProposalNotPending(receipt=first)).first_receipt is None  # only a replay


def test_a_question_awaiting_its_second_approver_says_so_and_asks_on() -> None:
    waiting = proposal(status=ProposalStatus.AWAITING_SECOND)
    assert awaiting_second(waiting)
    assert Ask(waiting).note == AWAITING_SECOND_NOTE
    assert Ask(proposal()).note is None
    approved = proposal(status=ProposalStatus.CONFIRMED, second_approver="lead")
    assert approved_by_second(approved)
    assert not approved_by_second(proposal(status=ProposalStatus.CONFIRMED))


def test_the_latest_edit_is_found_through_every_successor() -> None:
    chain = {
        "prop_1": proposal("prop_1", status=ProposalStatus.SUPERSEDED, superseded_by="prop_2"),
        "prop_2": proposal("prop_2", status=ProposalStatus.SUPERSEDED, superseded_by="prop_3"),
        "prop_3": proposal("prop_3"),
    }
    assert latest(chain.__getitem__, chain["prop_1"]).proposal_id == "prop_3"
    assert latest(chain.__getitem__, chain["prop_3"]) is chain["prop_3"]
