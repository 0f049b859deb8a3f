""" "Mark as Resolved": what `Command(goto="__end__")` means for a thread awaiting approval.

Agent Chat UI's button sends `Command(goto="__end__")` and no answer. `__end__` names no
node, so LangGraph only re-runs the waiting approval tasks, which would ask the same
questions again while the UI says the thread is resolved. writegate defines it, for
every way in: a question re-asked in a run that such a command started is answered
with `RESOLVE`, which cancels its proposal (outcome `cancelled`, audited). Its tool
message carries `RESOLVED`; writegate's agent and `wg.middleware()` then end the run
without a model turn, and the model reads the cancellations with the thread's next
message (a hand-built graph routes as its own edges say).

The command is read where LangGraph keeps it: as a write of the run's input on the
thread's checkpoint (task id all zeros, channel `branch:to:__end__`), read only when
a re-run question is about to be asked again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AnyMessage, ToolMessage
from langchain_core.runnables import RunnableConfig

# LangGraph's own keys for a task's run config and for a command's writes; the
# "Mark as Resolved" tests fail should they ever move.
from langgraph._internal._constants import (
    CONFIG_KEY_CHECKPOINT_MAP,
    CONFIG_KEY_CHECKPOINTER,
    CONFIG_KEY_RESUMING,
    NULL_TASK_ID,
)
from langgraph.graph import END

# The answer each pending question gets; the branch marks its ToolMessage with RESOLVED.
RESOLVE = {"type": "writegate.resolve"}
RESOLVED = {"resolved": True}
_TO_END = f"branch:to:{END}"


def resolved_by_command(config: RunnableConfig) -> bool:
    """Whether the run re-asking a question was started by `Command(goto="__end__")`."""
    conf: dict[str, Any] = dict(config.get("configurable") or {})
    saver = conf.get(CONFIG_KEY_CHECKPOINTER)
    if not conf.get(CONFIG_KEY_RESUMING) or saver is None:
        return False  # a fresh run asks; only a resume can carry the command
    root = {
        "configurable": {
            "thread_id": conf.get("thread_id"),
            "checkpoint_ns": "",
            "checkpoint_id": (conf.get(CONFIG_KEY_CHECKPOINT_MAP) or {}).get(""),
        }
    }
    found = saver.get_tuple(root)
    writes = found.pending_writes if found is not None else None
    return any(task == NULL_TASK_ID and channel == _TO_END for task, channel, _ in writes or ())


def ends_turn(messages: Sequence[AnyMessage]) -> bool:
    """Whether the newest tool results include a question the person marked resolved."""
    for message in reversed(messages):
        if not isinstance(message, ToolMessage):
            return False
        if message.artifact == RESOLVED:
            return True
    return False
