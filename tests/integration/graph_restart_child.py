"""A separate process for the restart tests: run a thread to its approval, or resume it.

    python graph_restart_child.py start THREAD ORDER   # prints the interrupt, then blocks
    python graph_restart_child.py resume THREAD JSON   # resumes with that decision

The database comes from DATABASE_URL, as for any writegate process. `start` prints one
JSON line once the approval is pending and then waits on stdin, so the parent can kill
it with SIGKILL while it waits; `resume` prints one JSON line with the outcome.
"""

from __future__ import annotations

import json
import sys

from langchain_core.messages import HumanMessage
from langgraph.types import Command

from tests.integration.graph_helpers import (
    config,
    interrupts,
    refund_call,
    scripted_graph,
    tool_content,
    tool_messages,
)
from writegate.demo.runtime import open_demo


def main(mode: str, thread_id: str, arg: str) -> None:
    runtime = open_demo(setup=False).runtime  # DATABASE_URL, as the parent set it
    try:
        if mode == "start":
            graph = scripted_graph(runtime, [refund_call(arg)], "done")
            out = graph.invoke({"messages": [HumanMessage(f"refund {arg}")]}, config(thread_id))
            (asked,) = interrupts(out)
            print(json.dumps({"interrupt_id": asked.id, **asked.value}), flush=True)
            sys.stdin.readline()  # wait here until killed (or told to leave)
        else:
            graph = scripted_graph(runtime, "done")
            out = graph.invoke(Command(resume=json.loads(arg)), config(thread_id))
            results = [tool_content(m) for m in tool_messages(out)]
            pending = [i.value["proposal_id"] for i in interrupts(out)]
            final = out["messages"][-1].content
            print(json.dumps({"results": results, "pending": pending, "final": final}))
    finally:
        runtime.close()


if __name__ == "__main__":
    main(*sys.argv[1:4])
