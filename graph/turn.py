"""One rule for a model turn's tool calls, shared by the tool node and the middleware.

Two calls sharing one id would share one approval: both are refused. A write asked for
twice in one turn (same name, same arguments, key order aside) would have its parallel
branches race for one proposal: only the first is proposed, the twin is told why not.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from writegate.approval.errors import ValidationFailed

SHARED_ID = "shared_id"


def _request_of(call: Mapping[str, Any]) -> str:
    """A write call's name and arguments as one comparable string (key order aside)."""
    return json.dumps([call["name"], call["args"]], sort_keys=True, default=str)


def turn_refusals(
    calls: Sequence[Mapping[str, Any]], is_write: Callable[[str], bool]
) -> dict[str | None, str]:
    """Call id -> `SHARED_ID`, or the id of the earlier call this write is a twin of."""
    counts = Counter(call["id"] for call in calls)
    refused: dict[str | None, str] = {}  # ids as the model sent them
    writes: dict[str, str | None] = {}  # (name, arguments) -> the first call that asked for it
    for call in calls:
        if counts[call["id"]] > 1:
            refused[call["id"]] = SHARED_ID
        elif is_write(call["name"]):
            first = writes.setdefault(_request_of(call), call["id"])
            if first != call["id"]:
                refused[call["id"]] = str(first)
    return refused


def turn_refusal(call: Mapping[str, Any], why: str) -> ValidationFailed:
    """The error a call refused by `turn_refusals` gets, as its tool message."""
    if why == SHARED_ID:
        return ValidationFailed(
            "two tool calls in one turn share this id; nothing was proposed for either",
            tool_call_id=call["id"],
        )
    return ValidationFailed(
        f"the same write was already requested in this turn by call {why}; "
        "nothing was proposed for this duplicate",
        tool_call_id=call["id"],
        duplicate_of=why,
    )
