"""A webhook receiver as its own process, for the delivery fault tests.

It checks every request's signature with the `standardwebhooks` library and appends
one JSON line per request to its log (written with one `write`, so a SIGKILL leaves
whole lines): `refused` (answered 500: the first `--fail-first` requests of each
webhook-id), `bad_signature` (400), `accepted` (then 200), `held`. With `--hold
before`, its first request is held unanswered (not accepted) until `<log>.release`
appears, then answered 503; with `--hold after` it is accepted first, then held, then
answered 200. The test kills a process while a request is held.

    python -m tests.integration.webhook_receiver_child PORT SECRET LOG [--fail-first N]
        [--hold before|after]
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from standardwebhooks import Webhook, WebhookVerificationError


class State:
    def __init__(self, args: argparse.Namespace) -> None:
        self.webhook = Webhook(args.secret)
        self.log = Path(args.log)
        self.release = Path(args.log + ".release")
        self.fail_first: int = args.fail_first
        self.hold: str | None = args.hold
        self.lock = threading.Lock()
        self.seen: Counter[str] = Counter()
        self.requests = 0

    def write(self, **line: Any) -> None:
        data = (json.dumps(line) + "\n").encode()
        fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    def wait_for_release(self) -> None:
        while not self.release.exists():  # the test creates it; a kill ends the wait
            time.sleep(0.01)


def handler(state: State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0"))).decode()
            headers = {k: v for k, v in self.headers.items()}
            msg_id = headers.get("webhook-id") or headers.get("Webhook-Id") or ""
            try:
                event = state.webhook.verify(body, headers)
            except WebhookVerificationError as exc:
                state.write(verdict="bad_signature", id=msg_id, error=str(exc))
                self._answer(400)
                return
            with state.lock:
                state.requests += 1
                first = state.requests == 1
                state.seen[msg_id] += 1
                refuse = state.seen[msg_id] <= state.fail_first
            line = {"id": msg_id, "type": event["type"], "event": event}
            if refuse:
                state.write(verdict="refused", **line)
                self._answer(500)
            elif first and state.hold == "before":
                state.write(verdict="held", **line)
                state.wait_for_release()
                self._answer(503)
            elif first and state.hold == "after":
                state.write(verdict="accepted", **line)
                state.write(verdict="held", **line)
                state.wait_for_release()
                self._answer(200)
            else:
                state.write(verdict="accepted", **line)
                self._answer(200)

        def _answer(self, status: int) -> None:
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("secret")
    parser.add_argument("log")
    parser.add_argument("--fail-first", type=int, default=0)
    parser.add_argument("--hold", choices=("before", "after"))
    args = parser.parse_args()
    state = State(args)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler(state))
    server.daemon_threads = True
    state.write(verdict="listening", id="")
    server.serve_forever()


if __name__ == "__main__":
    main()
