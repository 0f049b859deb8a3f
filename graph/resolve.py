""" "Mark as Resolved": what `Command(goto="__end__")` means for a thread awaiting approval.

Agent Chat UI's button sends `Command(goto="__end__")` and no answer. `__end__` names no
node, so LangGraph only re-runs the waiting approval tasks, which would ask the same
questions again while the UI says the thread is resolved. writegate defines it, for
every way in: a question re-asked in a run that such a command started is answered
with `RESOLVE`, which cancels its proposal (outcome `cancelled`, audited). Its tool
message carries `RESOLVED`; writegate's agent and `wg.middleware()` then end the run
without a model turn, and the model reads the cancellations with the thread's next
message (a hand-built graph routes as its own edges say).

The command is read where LangGraph keeps it, only when a re-run question is about to
be asked again. Run at the thread's head, as a plain command is, it is a write of the
run's input on that checkpoint (task id all zeros, channel `branch:to:__end__`). Run
with a `checkpoint`, as Agent Chat UI sends every run, LangGraph forks: it saves a
checkpoint of its own (source `fork`) whose state drops the write (`__end__` is no
channel), and re-runs the waiting tasks with their answers dropped. What is left to
read is the fork itself: a run that forked at the checkpoint where this question waited
and brought no answer for it. LangGraph forks so for a run with no input or a command
without `resume`; for writegate each means the person left the question unanswered,
and the question is cancelled rather than asked of nobody again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AnyMessage, ToolMessage
from langchain_core.runnables import RunnableConfig

# LangGraph's own keys for a task's run config and for a command's writes; the
# "Mark as Resolved" tests fail should they ever move.
from langgraph._internal._constants import (
    CONFIG_KEY_CHECKPOINT_MAP,
    CONFIG_KEY_CHECKPOINTER,
    CONFIG_KEY_REPLAY_STATE,
    CONFIG_KEY_RESUMING,
    INTERRUPT,
    NULL_TASK_ID,
    RESUME,
)
from langgraph.graph import END

from writegate.approval.wire import INTERRUPT_KIND
from writegate.graph.second import BY_SECOND_APPROVER

# The answer each pending question gets; the branch marks its ToolMessage with RESOLVED.
RESOLVE = {"type": "writegate.resolve"}
RESOLVED = {"resolved": True}
_TO_END = f"branch:to:{END}"


def resolved_by_command(config: RunnableConfig, tool_call_id: str) -> bool:
    """Whether the run re-asking the question of `tool_call_id` was started by
    `Command(goto="__end__")`, with or without a checkpoint (see the module docstring)."""
    conf: dict[str, Any] = dict(config.get("configurable") or {})
    saver = conf.get(CONFIG_KEY_CHECKPOINTER)
    # A fresh run asks; only a resume, or a subgraph replayed in a forked run (which is
    # not told it resumes), can carry the command.
    if saver is None or not (conf.get(CONFIG_KEY_RESUMING) or conf.get(CONFIG_KEY_REPLAY_STATE)):
        return False
    found = _read(saver, _root(conf, (conf.get(CONFIG_KEY_CHECKPOINT_MAP) or {}).get("")))
    if found is None:
        return False
    writes = found.pending_writes or ()
    if any(task == NULL_TASK_ID and channel == _TO_END for task, channel, _ in writes):
        return True
    if (found.metadata or {}).get("source") != "fork" or found.parent_config is None:
        return False
    if any(channel == RESUME for _, channel, _ in writes):
        return False  # an answer came with this run
    parent = _read(saver, found.parent_config)
    return parent is not None and waited(parent.pending_writes or (), tool_call_id)


def _read(saver: Any, config: RunnableConfig) -> Any:
    """`saver.get_tuple(config)`. LangGraph Server wraps a custom async checkpointer
    (writegate's Postgres one under `langgraph dev`) in an adapter with no synchronous
    reads; this node runs in a worker thread, so the read goes to the loop the saver
    belongs to. None if neither is possible: the question is then asked again."""
    try:
        return saver.get_tuple(config)
    except NotImplementedError:
        loop = getattr(saver, "loop", None)
        if not isinstance(loop, asyncio.AbstractEventLoop) or loop.is_closed():
            return None
        return asyncio.run_coroutine_threadsafe(saver.aget_tuple(config), loop).result()


def _root(conf: dict[str, Any], checkpoint_id: str | None) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": conf.get("thread_id"),
            "checkpoint_ns": "",
            "checkpoint_id": checkpoint_id,
        }
    }


def waited(writes: Sequence[Any], tool_call_id: str) -> bool:
    """Whether these writes hold writegate's question for this call, unanswered."""
    for _, channel, value in writes:
        if channel != INTERRUPT:
            continue
        for pending in value if isinstance(value, (list, tuple)) else [value]:
            asked = getattr(pending, "value", None)
            if (
                isinstance(asked, dict)
                and asked.get("type") == INTERRUPT_KIND
                and asked.get("tool_call_id") == tool_call_id
            ):
                return True
    return False


def ends_turn(messages: Sequence[AnyMessage]) -> bool:
    """Whether the newest tool results include a question the person marked resolved,
    or one a second approver answered on the requester's thread (`graph/second.py`):
    no model turn runs in such a run."""
    for message in reversed(messages):
        if not isinstance(message, ToolMessage):
            return False
        if message.artifact in (RESOLVED, BY_SECOND_APPROVER):
            return True
    return False
