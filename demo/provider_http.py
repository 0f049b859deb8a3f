"""The payment provider simulator as its own HTTP process, and a client for it.

Run as a separate process (`writegate provider serve`) so that a timeout is a real
socket timeout, a lost answer is a real hung connection and "apply then die" is a real
dead process. The server is `SimulatedProvider` (its `provider.refunds` table) behind:

    POST /v1/refunds          Idempotency-Key header; {order_id, amount_minor, currency}
    GET  /v1/refunds/<key>    the stored refund, or 404 if the key was never applied
    GET  /v1/refunds?since=T  every refund applied at or after T (ISO 8601), by key
    POST /_faults             {"rules": [...], "replace": true}: script faults (loopback)
    GET  /_calls              per key: calls seen, refunds answered, refunds received
                              after one was answered (`resent`); GET /healthz

`HttpProvider` is the `ProviderClient` for it. Its mapping is the protocol's: no
connection means nothing was sent (`temporarily_unavailable`); a timeout or a broken
connection after sending means it may have applied (`upstream_timeout`); 503 and 429
are what they say; a refusal comes back as its own error code.
"""

from __future__ import annotations

import http.client
import json
import os
import sys
import threading
from collections.abc import Callable
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

from psycopg_pool import ConnectionPool

from writegate import (
    RateLimited,
    TemporarilyUnavailable,
    UpstreamTimeout,
    WritegateError,
    error_for_code,
)
from writegate.demo.faults import FaultScript
from writegate.demo.provider import SimulatedProvider

REFUNDS = "/v1/refunds"
_STATUS = {"temporarily_unavailable": 503, "rate_limited": 429, "upstream_timeout": 504}


class _Handler(BaseHTTPRequestHandler):
    server: ProviderServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read stdout
        return None

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status == 429:
            self.send_header("Retry-After", "0")
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        value = json.loads(self.rfile.read(length) or b"{}")
        return value if isinstance(value, dict) else {}

    def _answer(self, call: Callable[[], dict[str, Any] | None], refund_key: str = "") -> None:
        try:
            result = call()
        except UpstreamTimeout:
            self.close_connection = True  # the stall is over; the answer is lost
            return
        except WritegateError as exc:
            self._send(_STATUS.get(exc.code, 422), exc.to_dict())
            return
        if result is None:
            self._send(404, {"code": "not_found", "message": "no refund for this key"})
        else:
            self._send(200, result)
            if refund_key:
                self.server.faults.refund_answered(refund_key)

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == "/healthz":
            self._send(200, {"status": "ok"})
        elif path == "/_calls":
            self._send(200, self.server.faults.call_counts())
        elif path == REFUNDS:
            since = parse_qs(urlsplit(self.path).query).get("since", [""])[0]
            try:
                moment = datetime.fromisoformat(since)
            except ValueError:
                self._send(400, {"code": "validation_failed", "message": "since: ISO 8601"})
                return
            self._answer(lambda: {"refunds": self.server.provider.applied_since(moment)})
        elif path.startswith(REFUNDS + "/"):
            key = unquote(path[len(REFUNDS) + 1 :])
            self._answer(lambda: self.server.provider.lookup(key))
        else:
            self._send(404, {"code": "not_found", "message": "no such endpoint"})

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        body = self._body()
        if path == "/_faults":
            rules = [str(r) for r in body.get("rules", [])]
            try:
                if body.get("replace", True):
                    self.server.faults.reset(rules)
                else:
                    self.server.faults.add(*rules)
            except ValueError as exc:
                self._send(400, {"code": "validation_failed", "message": str(exc)})
                return
            self._send(200, {"rules": [r.text for r in self.server.faults.rules]})
        elif path == REFUNDS:
            key = self.headers.get("Idempotency-Key", "")
            self._answer(
                lambda: self.server.provider.refund(
                    idempotency_key=key,
                    order_id=body.get("order_id", ""),
                    amount_minor=body.get("amount_minor", 0),
                    currency=body.get("currency", ""),
                ),
                refund_key=key,
            )
        else:
            self._send(404, {"code": "not_found", "message": "no such endpoint"})


class ProviderServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], provider: SimulatedProvider, faults: FaultScript):
        super().__init__(address, _Handler)
        self.provider = provider
        self.faults = faults


def _die() -> None:
    sys.stdout.flush()
    os._exit(70)  # no cleanup, no answer: the process is gone, the refund is committed


def serve(
    conninfo: str,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    rules: list[str] | None = None,
    stall_seconds: float = 5.0,
    ready: Callable[[str], None] | None = None,
) -> None:
    """Serve until interrupted; `ready(url)` is called once the socket listens."""
    stop = threading.Event()
    faults = FaultScript.from_env(stall=lambda: stop.wait(stall_seconds), die=_die)
    faults.add(*(rules or []))
    pool: ConnectionPool[Any] = ConnectionPool(
        conninfo, kwargs={"autocommit": True}, min_size=1, max_size=8, open=True
    )
    server = ProviderServer((host, port), SimulatedProvider(pool=pool, faults=faults), faults)
    url = f"http://{host}:{server.server_address[1]}"
    if ready is not None:
        ready(url)
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        stop.set()  # release stalled handlers
        server.server_close()
        pool.close()


class HttpProvider:
    """`ProviderClient` over HTTP with a per-call timeout."""

    def __init__(self, base_url: str, *, timeout: float = 2.0) -> None:
        parts = urlsplit(base_url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.timeout = timeout

    def _call(
        self, method: str, path: str, body: dict[str, Any] | None = None, key: str = ""
    ) -> tuple[int, dict[str, Any]]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            try:
                conn.connect()
            except OSError as exc:  # nothing was sent: it cannot have applied
                raise TemporarilyUnavailable("provider not reachable", reason=str(exc)) from exc
            headers = {"Content-Type": "application/json", "Idempotency-Key": key}
            data = json.dumps(body).encode() if body is not None else None
            try:
                conn.request(method, path, body=data, headers=headers)
                response = conn.getresponse()
                payload = response.read()
            except (OSError, http.client.HTTPException) as exc:  # sent: it may have applied
                raise UpstreamTimeout(f"provider: {type(exc).__name__}") from exc
        finally:
            conn.close()
        try:
            parsed = json.loads(payload or b"{}")
        except ValueError:
            parsed = {}
        return response.status, parsed if isinstance(parsed, dict) else {}

    @staticmethod
    def _raise_for(status: int, body: dict[str, Any]) -> None:
        if status == 503:
            raise TemporarilyUnavailable(body.get("message"))
        if status == 429:
            raise RateLimited(body.get("message"))
        if status >= 500:  # the provider failed somewhere: it may have applied
            raise UpstreamTimeout(f"provider answered {status}")
        details = body.get("details") or {}
        raise error_for_code(body.get("code") or "execution_failed", body.get("message"), **details)

    def refund(
        self, *, idempotency_key: str, order_id: str, amount_minor: int, currency: str
    ) -> dict[str, Any]:
        payload = {"order_id": order_id, "amount_minor": amount_minor, "currency": currency}
        status, body = self._call("POST", REFUNDS, payload, key=idempotency_key)
        if status != 200:
            self._raise_for(status, body)
        return body

    def lookup(self, idempotency_key: str) -> dict[str, Any] | None:
        status, body = self._call("GET", f"{REFUNDS}/{quote(idempotency_key, safe='')}")
        if status == 404:
            return None
        if status != 200:
            self._raise_for(status, body)
        return body

    def applied_since(self, since: datetime) -> dict[str, dict[str, Any]]:
        query = urlencode({"since": since.isoformat()})
        status, body = self._call("GET", f"{REFUNDS}?{query}")
        if status != 200:
            self._raise_for(status, body)
        refunds: dict[str, dict[str, Any]] = body.get("refunds") or {}
        return refunds

    def set_faults(self, *rules: str, replace: bool = True) -> None:
        status, body = self._call("POST", "/_faults", {"rules": list(rules), "replace": replace})
        if status != 200:
            raise ValueError(body.get("message", "bad fault rules"))

    def calls(self) -> dict[str, dict[str, int]]:
        return self._call("GET", "/_calls")[1]

    def healthy(self) -> bool:
        try:
            return self._call("GET", "/healthz")[0] == 200
        except WritegateError:
            return False
