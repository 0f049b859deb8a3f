"""A small fake OpenAI-compatible server for tests (stdlib only, loopback, no network).

Serves ``POST /v1/chat/completions`` (plain JSON, or SSE when ``"stream": true``)
and ``GET /v1/models``. Each completion request pops the next reply a test queued
(text, tool calls, or an HTTP error) and every request is recorded, so tests can
check what the client sent, e.g. that tools were strict::

    with FakeOpenAIServer() as server:
        for name, value in server.env().items():
            monkeypatch.setenv(name, value)
        server.enqueue_tool_calls(FakeToolCall("get_order", {"order_id": "ord_1"}))
        ...
        assert server.chat_requests[0]["tools"][0]["function"]["strict"] is True

An empty queue answers 400, which the openai client does not retry, so a missing
reply fails the test at once. It retries 429/5xx, so queue one error per attempt.

Like OpenAI, it refuses (400, consuming no reply) a history in which an assistant
message's tool calls are not answered by tool messages right after it.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

CREATED = 1_700_000_000  # fixed timestamp keeps responses reproducible


@dataclass(frozen=True)
class FakeToolCall:
    name: str
    arguments: dict[str, Any] | str
    id: str | None = None

    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments)


@dataclass(frozen=True)
class FakeReply:
    text: str | None = None
    tool_calls: tuple[FakeToolCall, ...] = ()
    error_status: int | None = None
    error_message: str = "fake server error"


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: Any = None


@dataclass
class _State:
    replies: deque[FakeReply] = field(default_factory=deque)
    requests: list[RecordedRequest] = field(default_factory=list)
    served: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, state: _State, models: tuple[str, ...], chunk_size: int) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state, self.models, self.chunk_size = state, models, chunk_size


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean

    def _send_json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str) -> None:
        error = {"message": message, "type": "invalid_request_error", "code": None}
        self._send_json(status, {"error": error})

    def _record(self, body: Any) -> None:
        with self.server.state.lock:
            headers = {k.lower(): v for k, v in self.headers.items()}
            request = RecordedRequest(self.command, self.path, headers, body)
            self.server.state.requests.append(request)

    def do_GET(self) -> None:
        self._record(None)
        if self.path.split("?")[0].rstrip("/") != "/v1/models":
            return self._error(404, f"no route for GET {self.path}")
        models = [
            {"id": m, "object": "model", "created": CREATED, "owned_by": "writegate-tests"}
            for m in self.server.models
        ]
        self._send_json(200, {"object": "list", "data": models})

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            body = raw.decode(errors="replace")
        self._record(body)
        if self.path.split("?")[0].rstrip("/") != "/v1/chat/completions":
            return self._error(404, f"no route for POST {self.path}")
        if not isinstance(body, dict):
            return self._error(400, "request body is not a JSON object")
        unanswered = unanswered_tool_calls(body.get("messages") or [])
        if unanswered:
            return self._error(
                400,
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(unanswered)}",
            )
        state = self.server.state
        with state.lock:
            reply = state.replies.popleft() if state.replies else None
            state.served += 1
            number = state.served
        if reply is None:
            return self._error(400, "fake server: no scripted reply queued")
        if reply.error_status is not None:
            return self._error(reply.error_status, reply.error_message)
        completion_id = f"chatcmpl-fake-{number}"
        calls = [(c.id or f"call_fake_{number}_{i}", c) for i, c in enumerate(reply.tool_calls)]
        if body.get("stream"):
            return self._stream(body, completion_id, reply, calls)
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if calls:
            message["tool_calls"] = [
                {"id": cid, "type": "function", "function": _function(c, c.arguments_json())}
                for cid, c in calls
            ]
        choice = {"index": 0, "message": message, "finish_reason": _finish(calls)}
        self._send_json(
            200,
            {
                "id": completion_id,
                "object": "chat.completion",
                "created": CREATED,
                "model": body.get("model", ""),
                "choices": [choice],
                "usage": _usage(),
            },
        )

    def _stream(
        self,
        body: dict[str, Any],
        completion_id: str,
        reply: FakeReply,
        calls: list[tuple[str, FakeToolCall]],
    ) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        base = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": body.get("model", ""),
        }

        def send(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> None:
            chunk = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            self.wfile.write(f"data: {json.dumps({**chunk, **extra})}\n\n".encode())
            self.wfile.flush()

        size = self.server.chunk_size
        send({"role": "assistant", "content": ""})
        for piece in _pieces(reply.text or "", size):
            send({"content": piece})
        for index, (cid, call) in enumerate(calls):
            # Like the real API: the first delta carries id and name, later ones
            # only argument fragments, all keyed by the call's index.
            opening = {"index": index, "id": cid, "type": "function"}
            send({"tool_calls": [{**opening, "function": _function(call, "")}]})
            for piece in _pieces(call.arguments_json(), size):
                send({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        send({}, _finish(calls))
        if (body.get("stream_options") or {}).get("include_usage"):
            usage_chunk = {**base, "choices": [], "usage": _usage()}
            self.wfile.write(f"data: {json.dumps(usage_chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


def unanswered_tool_calls(messages: list[Any]) -> list[str]:
    """The tool-call ids of an assistant message not answered by the tool messages that
    follow it directly, as OpenAI checks a history."""
    missing: list[str] = []
    for at, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        asked = [call.get("id") for call in message.get("tool_calls") or []]
        answered = set()
        for after in messages[at + 1 :]:
            if not isinstance(after, dict) or after.get("role") != "tool":
                break
            answered.add(after.get("tool_call_id"))
        missing += [str(call_id) for call_id in asked if call_id not in answered]
    return missing


def _function(call: FakeToolCall, arguments: str) -> dict[str, str]:
    return {"name": call.name, "arguments": arguments}


def _finish(calls: list[tuple[str, FakeToolCall]]) -> str:
    return "tool_calls" if calls else "stop"


def _usage() -> dict[str, int]:
    return {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


class FakeOpenAIServer:
    """The fake server; use as a context manager, or call ``start()``/``stop()``."""

    def __init__(self, models: tuple[str, ...] = ("gpt-4o-mini",), chunk_size: int = 7) -> None:
        # A small chunk size splits tool-call arguments across several SSE deltas,
        # which is the part of streaming that clients get wrong.
        self._state = _State()
        self._models, self._chunk_size = models, chunk_size
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("fake OpenAI server is not running")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def env(self, api_key: str | None = "test-key", model: str | None = None) -> dict[str, str]:
        """Environment variables pointing ``writegate.openai_chat_model`` at this server."""
        values = {"OPENAI_BASE_URL": self.base_url}
        if api_key is not None:
            values["OPENAI_API_KEY"] = api_key
        if model is not None:
            values["WRITEGATE_MODEL"] = model
        return values

    def enqueue(self, *replies: FakeReply) -> None:
        with self._state.lock:
            self._state.replies.extend(replies)

    def enqueue_text(self, text: str) -> None:
        self.enqueue(FakeReply(text=text))

    def enqueue_tool_calls(self, *calls: FakeToolCall, text: str | None = None) -> None:
        self.enqueue(FakeReply(text=text, tool_calls=calls))

    def enqueue_error(self, status: int, message: str = "fake server error") -> None:
        self.enqueue(FakeReply(error_status=status, error_message=message))

    @property
    def pending(self) -> int:
        """Replies queued but not yet served."""
        with self._state.lock:
            return len(self._state.replies)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._state.lock:
            return list(self._state.requests)

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        """JSON bodies of the chat completion requests, oldest first."""
        return [
            r.body
            for r in self.requests
            if r.method == "POST" and r.path.startswith("/v1/chat/completions")
        ]

    def start(self) -> FakeOpenAIServer:
        if self._httpd is not None:
            return self
        self._httpd = _Server(self._state, self._models, self._chunk_size)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        self._wait_until_accepting()
        return self

    def _wait_until_accepting(self, timeout_s: float = 5.0) -> None:
        # The socket listens from construction, so this normally succeeds at once;
        # polling guards against a slow thread start without any fixed sleep.
        assert self._httpd is not None
        address = self._httpd.server_address[:2]
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with socket.create_connection((str(address[0]), int(address[1])), timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd, self._thread = None, None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
