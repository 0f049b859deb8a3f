"""One writegate process of any release, driven through its public API only.

    python driver.py leave           # under a release: leave approvals waiting
    python driver.py answer NAME...  # under a release: answer the named ones
    python driver.py hold            # open, then answer the names on each stdin line

Run with the python of the release's own environment and DATABASE_URL set, so that
`import writegate` is that release. This file imports nothing of the repository and
uses only what every release covered here has: `Writegate.open`, `write_tool`,
`wg.tool_node()`, `wg.middleware()` in `create_agent`, `wg.reconciler()`, the resume
event `{"action": "confirm", ...}`, and the run config's identity.

The tools' downstream is `upgrade_effects`, a table the test owns: every call of a
tool adds one row under its request key, so a write that ran twice shows as two rows.
Each scenario's thread id and proposal id go to `upgrade_threads`, for the next
process (another release) to pick up. Prints one JSON object.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import psycopg
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition
from langgraph.types import Command

import writegate
from writegate import Writegate, write_tool

TENANT = "tenant_up"
REQUESTER = "user_up"
SETUP_SQL = """
CREATE TABLE IF NOT EXISTS upgrade_effects (
    effect_id    bigserial PRIMARY KEY,
    request_key  text NOT NULL,
    tool         text NOT NULL,
    release      text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS upgrade_threads (
    name         text PRIMARY KEY,
    way          text NOT NULL,
    thread_id    text NOT NULL,
    proposal_id  text NOT NULL
);
"""
EFFECT_SQL = "INSERT INTO upgrade_effects (request_key, tool, release) VALUES (%s, %s, %s)"
LOOKUP_SQL = "SELECT effect_id FROM upgrade_effects WHERE request_key = %s ORDER BY effect_id"


def _url() -> str:
    return os.environ["DATABASE_URL"]


def _effect(tool: str, request_key: str) -> dict[str, Any]:
    with psycopg.connect(_url(), autocommit=True) as conn:
        row = conn.execute(
            EFFECT_SQL + " RETURNING effect_id", (request_key, tool, writegate.__version__)
        ).fetchone()
    assert row is not None
    return {"effect_id": row[0]}


def _lookup(args: dict[str, Any], request_key: str) -> dict[str, Any] | None:
    with psycopg.connect(_url()) as conn:
        row = conn.execute(LOOKUP_SQL, (request_key,)).fetchone()
    return {"effect_id": row[0]} if row else None


@write_tool(side_effect="external", resource=lambda args: f"counter:{args['counter']}",
            lookup=_lookup)  # fmt: skip
def bump(counter: str, amount_minor: int, currency: str, *, request_key: str) -> dict[str, Any]:
    """Add an amount to a counter.

    Args:
        counter: The counter's name.
        amount_minor: The amount, in minor units.
        currency: The currency, e.g. CNY.
    """
    return _effect("bump", request_key)


@write_tool(side_effect="external", resource=lambda args: f"counter:{args['counter']}",
            lookup=_lookup)  # fmt: skip
def bump_unsure(
    counter: str, amount_minor: int, currency: str, *, request_key: str
) -> dict[str, Any]:
    """Add an amount to a counter; the answer is lost after it applied.

    Args:
        counter: The counter's name.
        amount_minor: The amount, in minor units.
        currency: The currency, e.g. CNY.
    """
    _effect("bump_unsure", request_key)
    raise ConnectionResetError("the connection dropped before the answer came back")


class OneCall(BaseChatModel):
    """A model that asks for the tool call written in the user's message, then is done."""

    @property
    def _llm_type(self) -> str:
        return "upgrade-one-call"

    def bind_tools(self, tools: Any, **kwargs: Any) -> OneCall:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kw: Any) -> ChatResult:
        last = messages[-1]
        if isinstance(last, HumanMessage):
            call = json.loads(str(last.content))
            reply = AIMessage("", tool_calls=[{**call, "type": "tool_call"}])
        else:
            reply = AIMessage("done")
        return ChatResult(generations=[ChatGeneration(message=reply)])


def tool_node_graph(wg: Writegate) -> Any:
    model = OneCall()

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", wg.tool_node())
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=wg.checkpointer)


def middleware_graph(wg: Writegate) -> Any:
    from langchain.agents import create_agent

    return create_agent(
        OneCall(), [bump, bump_unsure], middleware=[wg.middleware()], checkpointer=wg.checkpointer
    )


# name: (way in, tool, amount in CNY minor units, answers given under `leave`)
SCENARIOS: dict[str, tuple[str, str, int, list[dict[str, Any]]]] = {
    "waiting_tool_node": ("tool_node", "bump", 100, []),
    "waiting_middleware": ("middleware", "bump", 100, []),
    "executed": ("tool_node", "bump", 100, [{"action": "confirm"}]),
    "unknown": ("tool_node", "bump_unsure", 100, [{"action": "confirm"}]),
    "second_approval": ("tool_node", "bump", 800_000, [{"action": "confirm", "retyped": ""}]),
}


def _config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id, "user_id": REQUESTER, "tenant_id": TENANT}}


def _asked(out: dict[str, Any]) -> list[dict[str, Any]]:
    return [dict(i.value) for i in out.get("__interrupt__", ())]


def _told(out: dict[str, Any]) -> list[Any]:
    return [json.loads(str(m.content)) for m in out["messages"] if isinstance(m, ToolMessage)]


def _retyped(question: dict[str, Any], amount: int) -> str:
    """The field the tier asks to type again, as the preview shows it."""
    field = question["preview"]["confirmation"].get("retype_field")
    shown = {f["name"]: f["display"] for f in question["preview"]["fields"]}
    return str(shown.get(field, amount))


def leave(wg: Writegate) -> dict[str, Any]:
    graphs = {"tool_node": tool_node_graph(wg), "middleware": middleware_graph(wg)}
    report: dict[str, Any] = {}
    with psycopg.connect(_url(), autocommit=True) as conn:
        for name, (way, tool, amount, answers) in SCENARIOS.items():
            thread_id = f"th_{name}"
            args = {"counter": name, "amount_minor": amount, "currency": "CNY"}
            call = {"name": tool, "id": f"call_{name}", "args": args}
            asked = HumanMessage(json.dumps(call))
            out = graphs[way].invoke({"messages": [asked]}, _config(thread_id))
            (question,) = _asked(out)
            proposal_id = question["proposal_id"]
            for answer in answers:
                if "retyped" in answer:
                    answer = {**answer, "retyped": _retyped(question, amount)}
                out = graphs[way].invoke(
                    Command(resume={**answer, "proposal_id": proposal_id}), _config(thread_id)
                )
            conn.execute(
                "INSERT INTO upgrade_threads VALUES (%s, %s, %s, %s)",
                (name, way, thread_id, proposal_id),
            )
            report[name] = {"proposal_id": proposal_id, "asked": _asked(out), "told": _told(out)}
    return report


# How long until the next unsettled execution is due for its check: past its lease
# (the release that ran it may still hold one) and its backoff, on the database clock;
# NULL when none is unsettled.
NEXT_DUE_SQL = """
SELECT extract(epoch FROM min(GREATEST(COALESCE(next_check_at, '-infinity'),
                                       COALESCE(lease_expires_at, '-infinity'))) - now())
FROM writegate.executions WHERE status IN ('running', 'unknown', 'failed_retryable')"""


def _reconcile(wg: Writegate) -> list[str]:
    """Drain the reconciler until no unsettled execution is left to wait for."""
    settled: list[str] = []
    deadline = time.monotonic() + 120
    while True:
        batch = [repr(s) for s in wg.reconciler().drain()]
        settled += batch
        with psycopg.connect(_url()) as conn:
            row = conn.execute(NEXT_DUE_SQL).fetchone()
        due_in = None if row is None or row[0] is None else float(row[0])
        if due_in is None or (due_in <= 0 and not batch) or time.monotonic() > deadline:
            return settled
        time.sleep(max(due_in, 0.0) + 0.05)  # until the database says it is due


def answer(wg: Writegate, names: list[str]) -> dict[str, Any]:
    graphs = {"tool_node": tool_node_graph(wg), "middleware": middleware_graph(wg)}
    report: dict[str, Any] = {}
    with psycopg.connect(_url()) as conn:
        rows = conn.execute("SELECT name, way, thread_id, proposal_id FROM upgrade_threads")
        threads = {r[0]: r[1:] for r in rows.fetchall()}
    for name in names:
        if name == "reconcile":
            report[name] = _reconcile(wg)
            continue
        way, thread_id, proposal_id = threads[name]
        resume = {"action": "confirm", "proposal_id": proposal_id}
        out = graphs[way].invoke(Command(resume=resume), _config(thread_id))
        report[name if name not in report else f"{name} again"] = {
            "asked": _asked(out),
            "told": _told(out),
        }
    return report


def main(mode: str, names: list[str]) -> None:
    with psycopg.connect(_url(), autocommit=True) as conn:
        conn.execute(SETUP_SQL)
    with Writegate.open(_url(), tools=[bump, bump_unsure]) as wg:
        if mode == "hold":  # a process that keeps running while another release migrates
            _say({"ready": True})
            for line in sys.stdin:
                _say(answer(wg, line.split()))
            return
        _say(leave(wg) if mode == "leave" else answer(wg, names))


def _say(report: dict[str, Any]) -> None:
    print(json.dumps({"release": writegate.__version__, **report}, default=str), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
