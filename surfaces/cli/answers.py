"""Answering approvals at a terminal prompt: each question at its own explicit prompt
(confirm, decline, cancel, edit, or later to leave it pending), never from free text.

`writegate chat` asks its pending approvals through `answer_all`, and reads the chat box
through `read_line`. An edit asks for each argument in preview order, showing its
current value; an amount in minor units may be typed in the currency's major units
("10.00", "$10.00"), read exactly. A line with control characters is refused before it
is sent anywhere.
"""

from __future__ import annotations

from typing import Any

from writegate.approval.canonical import CanonicalizationError, check_input
from writegate.approval.money import (
    CURRENCIES,
    AmountError,
    format_major,
    format_minor,
    parse_major,
)
from writegate.surfaces.cli.common import console
from writegate.surfaces.cli.render import error_panel, expiry_text, preview_table
from writegate.surfaces.cli.terminal import markup_safe

DECISIONS = ("confirm", "decline", "cancel", "edit", "later")


class LeftThePrompt(Exception):
    """The person left: Ctrl-D at a prompt, or "later" at an approval."""


def read_line(prompt: str) -> str:
    """A line typed by the person; one with control characters is refused, not sent."""
    while True:
        try:
            text = console.input(prompt).strip()
        except (EOFError, KeyboardInterrupt):
            console.print()
            raise LeftThePrompt from None
        try:
            check_input(text)
        except CanonicalizationError as exc:
            console.print(error_panel(exc.to_dict(), title="not sent"))
            continue
        return text


def answer_all(requests: list[tuple[str, Any]]) -> dict[str, Any]:
    """Each (interrupt id, approval request) asked in turn, one at a time; the answers
    go back together as {interrupt_id: value}."""
    answers: dict[str, Any] = {}
    for number, (interrupt_id, value) in enumerate(requests, start=1):
        if len(requests) > 1:
            console.rule(f"approval {number} of {len(requests)}")
        request = value if isinstance(value, dict) else {}
        if request.get("error"):
            console.print(error_panel(request["error"], title="your last answer was refused"))
        console.print(preview_table(request))
        answers[interrupt_id] = _decide(request)
    return answers


def _decide(request: dict[str, Any]) -> dict[str, Any]:
    proposal_id = str(request.get("proposal_id", ""))
    while True:
        choice = read_line(f"decision \\[{' / '.join(DECISIONS)}]: ").lower()
        if choice in DECISIONS:
            break
        if not choice:
            continue
        console.print(
            f"[yellow]{markup_safe(repr(choice))} is not a decision.[/yellow] "
            f"Type one of: {', '.join(DECISIONS)}"
        )
    if choice == "later":
        until = markup_safe(expiry_text(request.get("expires_at", "")))
        console.print(f"[dim]left pending until {until}; nothing was sent. It waits in the "
                      "database; after that it expires and nothing runs.[/dim]")  # fmt: skip
        raise LeftThePrompt
    if choice == "edit":
        return {"action": "edit", "proposal_id": proposal_id, "args": _edit_args(request)}
    return {"action": choice, "proposal_id": proposal_id}


def _edit_args(request: dict[str, Any]) -> dict[str, Any]:
    """Ask for each argument in preview order, showing its current value; Enter keeps it."""
    args: dict[str, Any] = dict(request.get("args") or {})
    fields = (request.get("preview") or {}).get("fields", [])
    displays = {f["name"]: str(f.get("display")) for f in fields if f.get("name") in args}
    order = [*displays, *(name for name in args if name not in displays)]
    currency = str(args.get("currency", ""))
    return {name: _ask_value(name, args[name], displays.get(name), currency) for name in order}


def _ask_value(name: str, current: Any, display: str | None, currency: str) -> Any:
    shown = repr(current) + (f" = {display}" if display and display != str(current) else "")
    while True:
        text = read_line(markup_safe(f"  {name} (now {shown}; Enter keeps it): "))
        if not text:
            return current
        if not isinstance(current, int) or isinstance(current, bool):
            return text
        if text.isdigit():
            return int(text)  # a bare integer keeps its old meaning: minor units
        if name.endswith("_minor") and currency in CURRENCIES:
            try:
                return parse_major(text, currency)  # "10.00", "$10.00": exact, via Decimal
            except AmountError as exc:
                hint = _integer_hint(name, currency)
                console.print(f"[yellow]{markup_safe(exc)}: {markup_safe(hint)}[/yellow]")
                continue
        console.print(f"[yellow]{markup_safe(_integer_hint(name, currency))}[/yellow]")


def _integer_hint(name: str, currency: str) -> str:
    if name.endswith("_minor") and currency in CURRENCIES:
        example = format_minor(1000, currency)
        return (f"{name} takes an integer of minor units (1000) or an amount in "
                f"{currency} ({example} or {format_major(1000, currency)})")  # fmt: skip
    return f"{name} takes an integer"
