"""The preview a person confirms, as plain text: `writegate confirm` prints these lines
on a terminal and the MCP server's elicitation shows them. Nothing here imports MCP,
so confirming on a terminal needs no `[mcp]` extra."""

from __future__ import annotations

from typing import Any

from writegate.approval.canonical import to_rfc3339
from writegate.approval.inert import inert_text
from writegate.approval.models import Proposal


def retype_ask(proposal: Proposal) -> dict[str, Any] | None:
    """The preview's re-type requirement (higher confirmation tiers), if it has one."""
    block = proposal.preview.get("confirmation") or {}
    return block if block.get("retype_field") else None


def confirm_lines(proposal: Proposal) -> list[str]:
    """The preview a person confirms, line by line. The proposal's preview is inert
    already (`approval/inert.py`), and so is each line's every other part."""
    preview = proposal.preview
    lines = [
        f"Please confirm: {preview.get('title', proposal.operation)}",
        f"Target: {preview.get('target', inert_text(proposal.resource))}",
        *(f"  {f['name']}: {f['display']}" for f in preview.get("fields", [])),
        f"Impact: {preview.get('impact', '')}",
    ]
    if preview.get("irreversible"):
        lines.append("This cannot be undone.")
    lines.append(
        f"Proposal {proposal.proposal_id}; this request expires at "
        f"{to_rfc3339(proposal.expires_at)}."
    )
    return lines
