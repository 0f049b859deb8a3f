"""A downstream that answers slower than writegate's deadline, and a tool that calls it.

`SlowService` is a small HTTP service on 127.0.0.1 that does NOT deduplicate: every
POST it receives is counted, and it applies and answers only once the test releases
it, so "slower than the deadline" is an event the test controls, never a sleep.
`GET /payments/<key>` answers what it applied for a key (404: never applied), for a
tool with a lookup. It is the example payments API of `examples/tool_node_http.py`,
without its deduplication.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from datetime import timedelta
from typing import Any

from langgraph.types import Command

from examples.tool_node_http import PaymentsApi, _Handler
from tests.integration.fault_scripts.harness import new_id
from tests.integration.library_helpers import asked, confirm, last_tool, run_config, scripted
from writegate import RetryPolicy, Writegate, write_tool

HOLD_S = 60.0  # a held request answers at the latest after this (the test's own guard)
# A one-second deadline: the 10 s deadline and 11 s service, scaled down.
DEADLINE = RetryPolicy(call_timeout=1.0, lease=timedelta(seconds=3))


class SlowService(PaymentsApi):
    """The example's payments API, made slow and forgetful of keys: every POST counts
    and applies, and it answers only once `release` is set."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__()
        self.RequestHandlerClass = _SlowHandler
        self.release = threading.Event()
        self.posts: list[str] = []  # the Idempotency-Key of every POST received

    def start(self) -> SlowService:
        super().start()
        return self

    def stop(self) -> None:
        self.release.set()
        self.shutdown()
        self.server_close()

    def post_count(self) -> int:
        with self.lock:
            return len(self.posts)


class _SlowHandler(_Handler):
    server: SlowService

    def do_POST(self) -> None:
        key = self.headers.get("Idempotency-Key", "")
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        service = self.server
        with service.lock:
            service.posts.append(key)
        service.release.wait(HOLD_S)
        with service.lock:  # no deduplication: every POST applies, the last one is found
            payment = {"payment_id": f"pay_{len(service.posts)}", **body}
            service.payments[f"{key}#{len(service.payments)}"] = payment
            service.payments[key] = payment
        self._send(200, payment)


class SlowClient:
    """A client of `SlowService`; it waits 10 s, longer than writegate's deadline here."""

    def __init__(self, url: str) -> None:
        self.url = url

    def _request(self, method: str, path: str, body: Any = None, key: str = "") -> Any:
        headers = {"Content-Type": "application/json", "Idempotency-Key": key}
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data, headers, method=method)
        with urllib.request.urlopen(req, timeout=10) as answer:
            return json.loads(answer.read())

    def pay(self, account: str, cents: int, request_key: str) -> dict[str, Any]:
        answer: dict[str, Any] = self._request(
            "POST", "/payments", {"account": account, "cents": cents}, key=request_key
        )
        return answer

    def lookup(self, args: dict[str, Any], request_key: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self._request("GET", f"/payments/{request_key}")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise
        return found


def slow_tool(url: str, *, with_lookup: bool = False, **declared: Any) -> Any:
    """`pay_slowly`: POSTs to `url` with the request key as its Idempotency-Key;
    `declared` goes to `write_tool` (e.g. `retry=`)."""
    client = SlowClient(url)

    @write_tool(
        side_effect="external",
        resource=lambda args: f"account:{args['account']}",
        lookup=client.lookup if with_lookup else None,
        **declared,
    )
    def pay_slowly(account: str, cents: int, *, request_key: str) -> dict[str, Any]:
        """Pay an amount into an account through a slow payments service.

        Args:
            account: The account id.
            cents: Amount in cents.
        """
        return client.pay(account, cents, request_key)

    return pay_slowly


def pay_call() -> dict[str, Any]:
    args = {"account": "acct_1", "cents": 1250}
    return {"name": "pay_slowly", "args": args, "id": new_id("call"), "type": "tool_call"}


def confirmed_write(wg: Writegate, call: dict[str, Any]) -> dict[str, Any]:
    """Ask, confirm, and return what the model was told about the write."""
    agent = wg.build_agent(scripted([call], "done", "done"))
    config = run_config(new_id("thread"))
    (question,) = asked(agent.invoke({"messages": [("user", "go")]}, config))
    return last_tool(agent.invoke(Command(resume=confirm(question)), config))
