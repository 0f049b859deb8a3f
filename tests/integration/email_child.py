"""A separate process for the email example's crash tests.

    python -m tests.integration.email_child start  THREAD PORT LOG        # asks, then blocks
    python -m tests.integration.email_child resume THREAD PORT LOG JSON   # answers the thread
    python -m tests.integration.email_child replay THREAD PORT LOG JSON   # answers its old question

The database comes from DATABASE_URL. `start` prints the interrupt as one JSON line
once the approval is pending and waits on stdin, so the parent can SIGKILL it there.
`resume` answers the thread as it stands; `replay` answers from the checkpoint that
asked the question (a double click, a replayed request). Both print one JSON line
with the tool results and the questions still pending, unless killed first.
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.types import Command

from examples.email_agent import SentLog, build, email_call, email_tools
from writegate import Writegate
from writegate.approval.execution import RetryPolicy
from writegate.graph.scripted import ScriptedChatModel

# A killed sender is reconciled soon; the lease outlasts the deadline.
SHORT_LEASE = RetryPolicy(call_timeout=0.8, lease=timedelta(seconds=1))


def _config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread, "user_id": "u1", "tenant_id": "t1"}}


def _asking(agent: Any, config: dict[str, Any]) -> dict[str, Any]:
    """The newest checkpoint of the thread with a question pending."""
    for snapshot in agent.get_state_history(config):
        if snapshot.interrupts:
            return {"configurable": {**config["configurable"], **snapshot.config["configurable"]}}
    raise SystemExit("no question was ever asked on this thread")


def main(mode: str, thread: str, port: str, log: str, answer: str = "") -> None:
    tools = email_tools(int(port), SentLog(log))
    with Writegate.open(tools=tools, retry=SHORT_LEASE) as wg:
        config = _config(thread)
        if mode == "start":
            script = [AIMessage("", tool_calls=[email_call()]), AIMessage("Sent.")]
            agent = build(wg, ScriptedChatModel(script=script))
            out = agent.invoke({"messages": [HumanMessage("Ask Bob about lunch")]}, config)
            (asked,) = out["__interrupt__"]
            print(json.dumps({"interrupt_id": asked.id, **asked.value}), flush=True)
            sys.stdin.readline()  # wait here until killed
            return
        agent = build(wg, ScriptedChatModel(script=[AIMessage("Done.")] * 2))
        where = _asking(agent, config) if mode == "replay" else config
        out = agent.invoke(Command(resume=json.loads(answer)), where)
        results = [
            json.loads(str(m.content)) for m in out["messages"] if isinstance(m, ToolMessage)
        ]
        pending = [item.value["proposal_id"] for item in out.get("__interrupt__", [])]
        print(json.dumps({"results": results, "pending": pending}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
