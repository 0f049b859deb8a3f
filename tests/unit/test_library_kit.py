"""The public tool kit without a database: schemas, declaration errors, refusals."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from typing import Annotated, Any, Literal

import pytest
from langchain_core.messages import AIMessage
from langchain_core.tools import InjectedToolArg, tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from writegate import ValidationFailed, read_tool, write_tool

CALLS: list[dict[str, Any]] = []


@write_tool(side_effect="reversible")
def set_status(ticket: str, status: Literal["open", "closed"], *, request_key: str) -> dict:
    """Set the status of one ticket.

    Args:
        ticket: The ticket id.
        status: The new status.
    """
    CALLS.append({"ticket": ticket, "status": status, "request_key": request_key})
    return {"ticket": ticket, "status": status}


def test_schema_comes_from_the_type_hints_and_the_docstring() -> None:
    schema = set_status.spec.json_schema()
    assert schema == {
        "type": "object",
        "properties": {
            "ticket": {"type": "string", "description": "The ticket id."},
            "status": {
                "type": "string",
                "enum": ["open", "closed"],
                "description": "The new status.",
            },
        },
        "required": ["ticket", "status"],
        "additionalProperties": False,
    }
    assert set_status.description == "Set the status of one ticket."
    assert "request_key" not in set_status.tool_call_schema.model_fields


def test_a_write_tool_refuses_to_run_when_invoked_directly() -> None:
    answer = json.loads(set_status.invoke({"ticket": "t1", "status": "closed"}))
    assert answer["code"] == "unprotected" and answer["retryable"] is False
    assert CALLS == []


def test_a_write_tool_refuses_to_run_in_a_plain_tool_node() -> None:
    call = {"name": "set_status", "args": {"ticket": "t1", "status": "closed"}, "id": "c1"}
    builder = StateGraph(MessagesState)
    builder.add_node("tools", ToolNode([set_status]))
    builder.add_edge(START, "tools")
    out = builder.compile().invoke({"messages": [AIMessage("", tool_calls=[call])]})
    message = out["messages"][-1]
    assert message.status == "error"
    assert json.loads(message.content)["code"] == "unprotected"
    assert CALLS == []


@tool
def _mail(to: str, request_key: Annotated[str, InjectedToolArg]) -> dict:
    """Send one mail.

    Args:
        to: The address.
    """
    CALLS.append({"to": to, "request_key": request_key})
    return {"sent": to}


@tool
async def _amail(to: str, request_key: Annotated[str, InjectedToolArg]) -> dict:
    """Send one mail, asynchronously.

    Args:
        to: The address.
    """
    CALLS.append({"to": to, "request_key": request_key})
    return {"sent": to}


WRAPPED = {
    "function": set_status,
    "langchain tool": write_tool(_mail, side_effect="external", name="mail"),
    "async langchain tool": write_tool(_amail, side_effect="external", name="amail"),
}
ARGS = {"set_status": {"ticket": "t1", "status": "closed"}, "mail": {"to": "a@b.c"},
        "amail": {"to": "a@b.c"}}  # fmt: skip


def _direct(guarded: Any, args: dict[str, Any]) -> list[str]:
    return [guarded.invoke(args), asyncio.run(guarded.ainvoke(args))]


def _as_tool_call(guarded: Any, args: dict[str, Any]) -> list[str]:
    call = {"name": guarded.name, "args": args, "id": "c1", "type": "tool_call"}
    messages = [guarded.invoke(call), asyncio.run(guarded.ainvoke(call))]
    assert all(m.status == "error" and m.tool_call_id == "c1" for m in messages)
    return [m.content for m in messages]


def _plain_tool_node(guarded: Any, args: dict[str, Any]) -> list[str]:
    call = {"name": guarded.name, "args": args, "id": "c1", "type": "tool_call"}
    builder = StateGraph(MessagesState)
    builder.add_node("tools", ToolNode([guarded]))
    builder.add_edge(START, "tools")
    graph, state = builder.compile(), {"messages": [AIMessage("", tool_calls=[call])]}
    messages = [
        graph.invoke(state)["messages"][-1],
        asyncio.run(graph.ainvoke(state))["messages"][-1],
    ]
    assert all(m.status == "error" for m in messages)
    return [m.content for m in messages]


@pytest.mark.parametrize("kind", sorted(WRAPPED))
@pytest.mark.parametrize(
    "how", [_direct, _as_tool_call, _plain_tool_node], ids=lambda f: f.__name__
)
def test_outside_writegate_a_write_tool_refuses_with_a_structured_error_and_runs_nothing(
    kind: str, how: Callable[[Any, dict[str, Any]], list[str]]
) -> None:
    guarded = WRAPPED[kind]
    before = len(CALLS)
    for content in how(guarded, ARGS[guarded.name]):
        assert "Traceback" not in content
        body = json.loads(content)
        assert body["code"] == "unprotected" and body["retryable"] is False
        assert isinstance(body["message"], str) and body["message"]
    assert len(CALLS) == before  # neither the function nor the wrapped tool ran


def test_a_read_tool_not_registered_with_writegate_refuses_too() -> None:
    @read_tool
    def peek(ticket: str) -> dict:
        """Peek at a ticket."""
        raise AssertionError("must not run unaudited")

    assert json.loads(peek.invoke({"ticket": "t1"}))["code"] == "unprotected"


def test_a_write_function_must_take_the_request_key() -> None:
    with pytest.raises(TypeError, match="request_key"):

        @write_tool(side_effect="external")
        def send(to: str) -> None:
            """Send."""


def test_the_request_key_must_be_keyword_only() -> None:
    with pytest.raises(TypeError, match="keyword-only"):

        @write_tool(side_effect="external")
        def send(to: str, request_key: str) -> None:
            """Send."""


def test_by_default_the_target_is_the_tool_and_each_argument_shows_as_is() -> None:
    args = set_status.spec.normalize({"ticket": "t1", "status": "closed"})
    seen = set_status.spec.validate(None, args)  # no validate=: nothing to look up
    assert (seen.resource, seen.state_version) == ("set_status", 0)
    preview = set_status.spec.preview(args, seen)
    assert preview.fields == [
        {"name": "ticket", "value": "t1", "display": "t1"},
        {"name": "status", "value": "closed", "display": "closed"},
    ]
    assert preview.side_effect == "reversible" and not preview.irreversible


@pytest.mark.parametrize(
    "raw",
    [
        {"ticket": 7, "status": "closed"},  # no coercion of a number to a string
        {"ticket": "t1", "status": "done"},  # not one of the Literal's values
        {"ticket": "t1"},  # every field is required
        {"ticket": "t1", "status": "closed", "user_id": "u2"},  # no extra keys
    ],
)
def test_arguments_are_checked_strictly(raw: dict[str, Any]) -> None:
    with pytest.raises(ValidationFailed):
        set_status.spec.normalize(raw)


def test_a_write_tool_needs_a_side_effect() -> None:
    with pytest.raises(ValueError, match="side effect"):
        write_tool(side_effect="none")


def test_a_langchain_tool_is_wrapped_with_its_injected_request_key_hidden() -> None:
    @tool
    def mail(to: str, request_key: Annotated[str, InjectedToolArg]) -> str:
        """Send one mail.

        Args:
            to: The address.
        """
        return f"sent to {to} as {request_key}"

    wrapped = write_tool(mail, side_effect="external")
    assert wrapped.spec.json_schema()["properties"] == {"to": {"type": "string"}}
    assert json.loads(wrapped.invoke({"to": "a@b.c"}))["code"] == "unprotected"


def test_a_langchain_tool_that_lets_the_model_set_the_key_is_refused() -> None:
    @tool
    def mail(to: str, request_key: str) -> str:
        """Send one mail."""
        return to

    with pytest.raises(TypeError, match="InjectedToolArg"):
        write_tool(mail, side_effect="external")


def test_the_public_names_import_without_the_servers() -> None:
    probe = (
        "import sys\n"
        "from writegate import *\n"
        "from writegate import Writegate, write_tool, read_tool\n"
        "print(sorted({'fastapi', 'mcp', 'uvicorn'} & set(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
