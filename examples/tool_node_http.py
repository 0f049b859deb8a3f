"""Protect your own HTTP-calling tool with `wg.tool_node()` in a hand-built StateGraph.

`pay` calls a small payments API with the operation's request key as its
`Idempotency-Key`; `lookup` asks the API whether that key was applied. If the answer
is lost (the API applies the payment, then the connection drops), writegate tells the
model `outcome_unknown`, and the reconciler settles it by lookup: exactly one payment.

Run it: `uv run python examples/tool_node_http.py` (DATABASE_URL or a local server).
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import tools_condition
from langgraph.types import Command

from writegate import PreviewField, ToolPreview, Writegate, write_tool

# -- a stand-in for someone's payments API ----------------------------------------------


class PaymentsApi(ThreadingHTTPServer):
    """POST /payments (Idempotency-Key header) and GET /payments/<key>, in memory."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.payments: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()
        self.drop_next_answer = False  # apply the next payment, then hang up

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> PaymentsApi:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self


class _Handler(BaseHTTPRequestHandler):
    server: PaymentsApi

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        key = self.headers.get("Idempotency-Key", "")
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        api = self.server
        with api.lock:
            # The same key applies once; a repeat gets the first answer back.
            number = len(api.payments)
            payment = api.payments.setdefault(key, {"payment_id": f"pay_{number}", **body})
            drop, api.drop_next_answer = api.drop_next_answer, False
        if drop:
            self.close_connection = True  # applied, but the caller never hears of it
            return
        self._send(200, payment)

    def do_GET(self) -> None:
        key = self.path.removeprefix("/payments/")
        payment = self.server.payments.get(key)
        self._send(200, payment) if payment else self._send(404, {"error": "unknown key"})


# -- the tool, declared with the public API ---------------------------------------------


def payment_tools(api_url: str, timeout: float = 5.0, *, with_lookup: bool = True) -> list[Any]:
    """`with_lookup=False` shows the other way: an unknown outcome goes to a person."""

    def request(method: str, path: str, body: Any = None, key: str = "") -> Any:
        headers = {"Content-Type": "application/json", "Idempotency-Key": key}
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(api_url + path, data, headers, method=method)
        with urllib.request.urlopen(req, timeout=timeout) as answer:
            return json.loads(answer.read())

    def lookup(args: dict[str, Any], request_key: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = request("GET", f"/payments/{request_key}")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None  # never seen: safe to send again with the same key
            raise
        return found

    def preview(args: dict[str, Any]) -> ToolPreview:
        shown = f"{args['cents'] / 100:.2f} EUR"
        return ToolPreview(
            fields=[
                PreviewField("account", args["account"]),
                PreviewField("cents", args["cents"], shown),
            ],
            impact=f"{shown} are paid into {args['account']}; this cannot be undone.",
        )

    @write_tool(
        side_effect="external",
        resource=lambda args: f"account:{args['account']}",
        preview=preview,
        lookup=lookup if with_lookup else None,
    )
    def pay(account: str, cents: int, *, request_key: str) -> dict[str, Any]:
        """Pay an amount into an account.

        Args:
            account: The account id, e.g. acct_1.
            cents: Amount in euro cents, an integer > 0.
        """
        body = {"account": account, "cents": cents}
        answer: dict[str, Any] = request("POST", "/payments", body, key=request_key)
        return answer

    return [pay]


# -- a hand-built graph, with wg.tool_node() where ToolNode would be -----------------------


def build(wg: Writegate, model: BaseChatModel) -> CompiledStateGraph[Any, Any, Any, Any]:
    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("before_model", wg.before_model())  # answers calls a new message left
    builder.add_node("agent", agent)
    builder.add_node("tools", wg.tool_node())
    builder.add_edge(START, "before_model")
    builder.add_edge("before_model", "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=wg.checkpointer)


def settle(wg: Writegate) -> list[Any]:
    """One reconcile pass: unknown outcomes looked up by their request keys."""
    return wg.reconciler().drain()


def main() -> None:
    from writegate.graph.scripted import ScriptedChatModel

    api = PaymentsApi().start()
    call = {"name": "pay", "args": {"account": "acct_1", "cents": 1250}, "id": "call_1"}
    model = ScriptedChatModel(script=[AIMessage("", tool_calls=[call]), AIMessage("Paid.")])
    config = {"configurable": {"thread_id": "example", "user_id": "u1", "tenant_id": "t1"}}
    with Writegate.open(tools=payment_tools(api.url)) as wg:
        graph = build(wg, model)
        out = graph.invoke({"messages": [HumanMessage("pay 12.50 into acct_1")]}, config)
        question = out["__interrupt__"][0].value
        print("asked:", question["preview"]["title"], question["preview"]["fields"])
        answer = {"action": "confirm", "proposal_id": question["proposal_id"]}
        out = graph.invoke(Command(resume=answer), config)
        print("tool said:", out["messages"][-2].content)
    api.shutdown()


if __name__ == "__main__":
    main()
