"""A user's own tools, declared only through the public API, and a hand-built graph.

`pay` stands for any downstream with idempotency keys: `LEDGER` is its record, keyed
by request key, so a test counts effects by the account it made up for itself.
"""

from __future__ import annotations

import json
import secrets
import threading
from typing import Annotated, Any

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import InjectedToolArg, tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition

from writegate import (
    Identity,
    NotFound,
    PreviewField,
    ToolPreview,
    Writegate,
    read_tool,
    write_tool,
)
from writegate.graph.scripted import ScriptedChatModel

LEDGER: dict[str, dict[str, Any]] = {}  # the downstream's record: request key -> payment
OWNERS: dict[str, str] = {}  # account -> user allowed to pay into it
VERSIONS: dict[str, int] = {}  # account -> its version (1 unless a test moves it)
SEEN: list[Identity] = []  # who each validation ran for
THREADS: list[int] = []  # which thread each validation ran on
TENANT = "tenant_lib"
USER = "user_lib"


def new_account(owner: str = USER) -> str:
    account = f"acct_{secrets.token_hex(4)}"
    OWNERS[account] = owner
    return account


def payments(account: str) -> int:
    return sum(1 for entry in LEDGER.values() if entry["account"] == account)


def _owned(args: dict[str, Any], identity: Identity) -> int:
    SEEN.append(identity)
    THREADS.append(threading.get_ident())
    if OWNERS.get(args["account"]) != identity.user_id:
        raise NotFound("no such account for this user", account=args["account"])
    return VERSIONS.get(args["account"], 1)


def _preview(args: dict[str, Any]) -> ToolPreview:
    amount = args["cents"]
    return ToolPreview(
        fields=[
            PreviewField("account", args["account"]),
            PreviewField("cents", amount, f"{amount / 100:.2f} EUR"),
        ],
        impact=f"{amount / 100:.2f} EUR leave the company account.",
    )


@write_tool(
    side_effect="external",
    resource=lambda args: f"account:{args['account']}",
    preview=_preview,
    validate=_owned,
    lookup=lambda args, key: LEDGER.get(key),
)
def pay(account: str, cents: int, *, request_key: str, identity: Identity) -> dict[str, Any]:
    """Pay an amount into one of the user's accounts.

    Args:
        account: The account id, e.g. acct_1234.
        cents: Amount in cents, an integer > 0.
    """
    LEDGER.setdefault(request_key, {"account": account, "cents": cents, "by": identity.user_id})
    return {"status": "paid", **LEDGER[request_key]}


@read_tool
def balance(account: str, *, identity: Identity) -> dict[str, Any]:
    """The number of payments made into one of the user's accounts.

    Args:
        account: The account id.
    """
    if OWNERS.get(account) != identity.user_id:
        raise NotFound("no such account for this user", account=account)
    return {"account": account, "payments": payments(account)}


@tool
async def _notify(
    account: str, request_key: Annotated[str, InjectedToolArg], config: RunnableConfig
) -> dict[str, Any]:
    """Notify the owner of an account.

    Args:
        account: The account id.
    """
    user = config["configurable"]["user_id"]
    LEDGER.setdefault(request_key, {"account": account, "notified": user})
    return {"status": "sent", "key_seen": request_key}


notify = write_tool(_notify, side_effect="external", name="notify")  # an existing LangChain tool


REFUNDS: dict[str, dict[str, Any]] = {}  # another downstream: request key -> refund


def refunds(order_ref: str) -> int:
    return sum(1 for refund in REFUNDS.values() if refund["order_ref"] == order_ref)


def _refund_preview(args: dict[str, Any]) -> ToolPreview:
    shown = f"¥{args['cents'] / 100:,.2f}"
    return ToolPreview(
        fields=[
            PreviewField("order_ref", args["order_ref"]),
            PreviewField("cents", args["cents"], shown, money_of="currency"),
            PreviewField("currency", args["currency"]),
        ],
        impact=f"{shown} go back to the customer.",
    )


@write_tool(
    side_effect="external",
    resource=lambda args: f"order:{args['order_ref']}",
    preview=_refund_preview,
    amount=lambda args: (args["cents"], args["currency"]),
)
def refund_order(order_ref: str, cents: int, currency: str, *, request_key: str) -> dict:
    """Refund an order: a user's own tool that happens to share the demo's name.

    Args:
        order_ref: The order reference.
        cents: The amount in minor units.
        currency: ISO currency code, e.g. CNY.
    """
    return REFUNDS.setdefault(request_key, {"order_ref": order_ref, "cents": cents})


def tool_call(name: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args, "id": f"call_{secrets.token_hex(4)}", "type": "tool_call"}


def scripted(*turns: list[dict[str, Any]] | str) -> ScriptedChatModel:
    return ScriptedChatModel(
        script=[
            AIMessage(turn) if isinstance(turn, str) else AIMessage("", tool_calls=turn)
            for turn in turns
        ]
    )


def hand_built(wg: Writegate, model: Any, checkpointer: Any = None) -> Any:
    """The plainest LangGraph agent, with `wg.tool_node()` where a ToolNode would be and
    `wg.before_model()` at the start of each turn.

    With an (async) `checkpointer` given, the agent node is async too."""

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    async def aagent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("before_model", wg.before_model())
    builder.add_node("agent", aagent if checkpointer is not None else agent)
    builder.add_node("tools", wg.tool_node())
    builder.add_edge(START, "before_model")
    builder.add_edge("before_model", "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=checkpointer or wg.checkpointer)


def asked(out: dict[str, Any]) -> list[Any]:
    return list(out.get("__interrupt__", []))


def last_tool(out: dict[str, Any]) -> dict[str, Any]:
    message = [m for m in out["messages"] if isinstance(m, ToolMessage)][-1]
    body = json.loads(str(message.content))
    assert isinstance(body, dict)
    return body


def confirm(interrupt: Any) -> dict[str, Any]:
    return {"action": "confirm", "proposal_id": interrupt.value["proposal_id"]}


def run_config(thread: str, user: str = USER) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread, "user_id": user, "tenant_id": TENANT}}
