"""Tell the model when an earlier write's open outcome has become final.

A write that ended unsettled (`outcome_unknown`, `in_progress`, or a transient refusal
such as `temporarily_unavailable`, `rate_limited`, `upstream_timeout`) is finished later
by the reconciler. On the thread's next turn the agent looks each such execution up by id
and adds one system note with the final receipt or error, once, so the model can tell
the user what really happened instead of guessing or proposing it again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AnyMessage, SystemMessage, ToolMessage

from writegate.approval.errors import UNSETTLED_CODES, WritegateError
from writegate.approval.models import Identity
from writegate.approval.reconcile import receipt_for
from writegate.approval.store import LedgerStore
from writegate.approval.wire import dumps, error_content, receipt_content

MARK = "writegate_settled"  # additional_kwargs key naming the execution reported


def _open_execution(message: ToolMessage) -> str | None:
    try:
        body = json.loads(str(message.content))
    except ValueError:
        return None
    if not isinstance(body, dict) or body.get("code") not in UNSETTLED_CODES:
        return None
    execution_id = (body.get("details") or {}).get("execution_id")
    return execution_id if isinstance(execution_id, str) else None


def awaiting_news(messages: Sequence[AnyMessage]) -> list[tuple[ToolMessage, str]]:
    """The unsettled results not reported yet, with their execution ids. No I/O: a turn
    with none (nearly every turn) needs no ledger read and no worker thread."""
    told = {m.additional_kwargs.get(MARK) for m in messages if isinstance(m, SystemMessage)}
    waiting: list[tuple[ToolMessage, str]] = []
    for message in messages:
        if isinstance(message, ToolMessage):
            execution_id = _open_execution(message)
            if execution_id is not None and execution_id not in told:
                told.add(execution_id)
                waiting.append((message, execution_id))
    return waiting


def settled_updates(
    store: LedgerStore, identity: Identity, waiting: list[tuple[ToolMessage, str]]
) -> list[SystemMessage]:
    """A note for each of `awaiting_news` whose outcome is final now."""
    notes: list[SystemMessage] = []
    for message, execution_id in waiting:
        content: dict[str, Any]
        try:
            content = receipt_content(receipt_for(store, identity, execution_id=execution_id))
        except WritegateError as exc:
            if exc.code in UNSETTLED_CODES:
                continue  # still being reconciled: nothing new to say
            content = error_content(exc)
        notes.append(
            SystemMessage(
                f"Update on the earlier {message.name} call {message.tool_call_id}: its outcome "
                f"is now final: {dumps(content)}",
                additional_kwargs={MARK: execution_id},
            )
        )
    return notes
