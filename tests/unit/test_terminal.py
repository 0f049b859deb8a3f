"""What the terminal shows is what executes: escape sequences and rich markup in any
text field are shown inert by every CLI renderer, never interpreted.

Each renderer prints a proposal (or row, message, error) whose every text field holds
escape sequences (ESC [, OSC, carriage return, backspace) and rich markup, on a console
that emits no styling of its own; so any control character in the output came from
the data, and every piece of markup must appear literally.
"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from rich.console import Console, RenderableType

from writegate import ProposalView
from writegate.approval.models import Proposal, ProposalStatus
from writegate.approval.wire import approval_request
from writegate.surfaces.cli import admin as cli_admin
from writegate.surfaces.cli import mcp as cli_mcp
from writegate.surfaces.cli import ops as cli_ops
from writegate.surfaces.cli import threads as cli_threads
from writegate.surfaces.cli.render import (
    audit_table,
    error_panel,
    message_renderable,
    preview_table,
    proposal_table,
    receipt_panel,
)

# Rewrites the amount line on a real terminal: up a line, clear it, print a fake one.
REDRAW = "\x1b[1A\x1b[2K\ramount_minor: ¥6.00"
HOSTILE = f"x{REDRAW}\x1b]8;;http://evil.invalid\x07link\x1b]8;;\x07 bs\b\b[/x] [bold]B[/bold]"
CONTROLS = ("\x1b", "\r", "\b", "\x07")
MARKUP = ("[/x]", "[bold]B[/bold]")


def _screen(*renderables: RenderableType) -> str:
    out = io.StringIO()
    console = Console(file=out, width=400, color_system=None, force_terminal=False)
    for renderable in renderables:
        console.print(renderable)
    return out.getvalue()


def assert_inert(screen: str) -> None:
    for control in CONTROLS:
        assert control not in screen, f"{control!r} reached the screen"
    for markup in MARKUP:
        assert markup in screen, f"{markup!r} was interpreted instead of shown"


def hostile_proposal() -> Proposal:
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    fields = [
        {"name": name, "value": HOSTILE, "display": HOSTILE}
        for name in ("order_id", "amount_minor", "reason")
    ]
    preview = {
        "title": HOSTILE,
        "target": HOSTILE,
        "impact": HOSTILE,
        "fields": fields,
        "irreversible": True,
        "confirmation": {"reasons": [HOSTILE]},
    }
    return Proposal(
        proposal_id="prop_" + HOSTILE,
        thread_id=HOSTILE,
        tool_call_id=HOSTILE,
        subject=HOSTILE,
        tenant_id=HOSTILE,
        operation=HOSTILE,
        resource=HOSTILE,
        args={"reason": HOSTILE},
        args_digest="sha256:0",
        fingerprint="sha256:0",
        state_version=1,
        preview=preview,
        policy_version=HOSTILE,
        request_key=HOSTILE,
        status=ProposalStatus.AWAITING,
        created_at=now,
        expires_at=now,
        tier=HOSTILE,
        second_approver=HOSTILE,
        revoked_by=HOSTILE,
    )


def test_the_preview_and_confirmation_tables_show_hostile_text_inert() -> None:
    proposal = hostile_proposal()
    screen = _screen(
        preview_table(approval_request(proposal)), cli_admin.confirmation_table(proposal)
    )
    assert_inert(screen)
    assert "amount_minor: ¥6.00" in screen  # shown, on the reason's own line, not redrawn


def test_a_proposal_view_shows_as_its_question_does() -> None:
    proposal = hostile_proposal()
    shown = _screen(proposal_table(ProposalView.of(proposal)))
    assert shown == _screen(preview_table(approval_request(proposal)))
    assert_inert(shown)


def test_writegate_confirm_prints_the_preview_inert(capsys: pytest.CaptureFixture[str]) -> None:
    cli_mcp.print_confirm_preview(hostile_proposal())
    screen = capsys.readouterr().out
    assert_inert(screen)
    # Every line of the preview is one of the preview's own lines: none was forged.
    assert all(
        line.split(":")[0].strip()
        in {"Please confirm", "Target", "order_id", "amount_minor", "reason", "Impact"}
        or line.startswith(("This cannot", "Proposal "))
        for line in screen.splitlines()
    ), screen


def test_errors_receipts_messages_and_audit_rows_show_hostile_text_inert() -> None:
    error = {"code": HOSTILE, "message": HOSTILE, "advice": HOSTILE, "details": {"x": HOSTILE}}
    receipt: dict[str, Any] = {
        "status": HOSTILE,
        "execution_id": HOSTILE,
        "request_key": HOSTILE,
        "operation": HOSTILE,
        "provider_ref": HOSTILE,
        "args_digest": HOSTILE,
        "result": {"refund_id": HOSTILE, "currency": HOSTILE},
    }
    messages = [
        HumanMessage(HOSTILE),
        AIMessage(HOSTILE, tool_calls=[{"name": HOSTILE, "args": {"r": HOSTILE}, "id": "c1"}]),
        ToolMessage(json.dumps(receipt), tool_call_id="c1", name=HOSTILE),
        ToolMessage(json.dumps(error), tool_call_id="c1", name=HOSTILE),
        ToolMessage(json.dumps({"status": HOSTILE}), tool_call_id="c1", name=HOSTILE),
    ]
    rows = [
        {c: HOSTILE for c in ("user_id", "tenant_id", "tool_name", "event", "status")},
        {"audit_id": 2, "tenant_id": "other", "error_code": HOSTILE},
    ]
    rendered = [message_renderable(m) for m in messages]
    screen = _screen(
        error_panel(error, title=HOSTILE),
        receipt_panel(receipt, title=HOSTILE),
        *(r for r in rendered if r is not None),
        audit_table(rows, title=HOSTILE),
    )
    assert_inert(screen)


def test_operator_tables_and_listings_show_hostile_text_inert(
    capsys: pytest.CaptureFixture[str],
) -> None:
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    row = {"user_id": HOSTILE, "tenant_id": HOSTILE, "updated_at": HOSTILE}
    pending = {
        "thread_id": HOSTILE,
        "proposal_id": HOSTILE,
        "operation": HOSTILE,
        "status": HOSTILE,
        "expired": False,
        "expires_at": now,
        "preview": {"title": HOSTILE},
    }
    screen = _screen(
        cli_threads.threads_table({HOSTILE: row}, [pending], HOSTILE),
        cli_threads.pending_table([pending]),
        cli_admin.approvals_table([hostile_proposal()], HOSTILE),
    )
    assert_inert(screen)
    escalation = {
        "execution_id": HOSTILE,
        "operation": HOSTILE,
        "resource": HOSTILE,
        "tenant_id": HOSTILE,
        "subject": HOSTILE,
        "thread_id": HOSTILE,
        "request_key": HOSTILE,
        "args": {"reason": HOSTILE},
        "escalation": {"why": HOSTILE},
        "created_at": HOSTILE,
        "checks": HOSTILE,
        "history": [
            {
                "created_at": HOSTILE,
                "event": HOSTILE,
                "status": HOSTILE,
                "result": {"action": HOSTILE},
            }
        ],
    }
    cli_ops.print_escalations([escalation])
    assert_inert(capsys.readouterr().out)
    after_failover = {
        "timeline_id": HOSTILE,
        "operation": HOSTILE,
        "tenant_id": HOSTILE,
        "proposal_id": HOSTILE,
        "proposal_status": HOSTILE,
        "request_key": HOSTILE,
        "args": {"reason": HOSTILE},
        "escalation": {"reason": HOSTILE, "downstream": {"ref": HOSTILE}},
        "created_at": HOSTILE,
    }
    cli_ops.print_failover_escalations([after_failover])
    assert_inert(capsys.readouterr().out)
