"""A webhook receiver: verify writegate's signature, tell a Slack channel who must act.

writegate signs every webhook per Standard Webhooks; this receiver checks the
signature with the same `standardwebhooks` library (`Webhook(secret).verify`), drops a
message it has seen already (by its `webhook-id`: delivery is at least once), and
forwards a waiting approval to a Slack-style incoming-webhook URL as `{"text": ...}`.
If the forward fails it answers 502, so writegate sends the event again later.

Run it:

    writegate webhooks add http://127.0.0.1:8787/ --tenant tenant_hz
    WEBHOOK_SECRET=whsec_... SLACK_WEBHOOK_URL=https://hooks.slack.com/services/... \\
        uv run python examples/webhook_receiver.py
    writegate webhooks deliver --loop --public-url http://127.0.0.1:8000

Keep the seen ids in a database of yours in production: here they live in memory.
"""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
from standardwebhooks import Webhook, WebhookVerificationError

# The events that ask a person to act.
WAITING = {
    "proposal.awaiting_confirmation": "waits for its requester's confirmation",
    "proposal.awaiting_second_approval": "needs a second approval",
    "proposal.expiring": "expires soon, still unanswered",
}


def slack_text(event: dict[str, Any]) -> str:
    """One Slack message for a waiting approval: what, for whom, the values shown, a link."""
    data = event["data"]
    preview = data.get("preview") or {}
    shown = ", ".join(f"{f['name']} {f['display']}" for f in preview.get("fields", []))
    lines = [
        f"*{preview.get('title', data['operation'])}* {WAITING[event['type']]}",
        f"{preview.get('target', data.get('resource', ''))}: {shown}",
        f"requested by {data['requester']} (tenant {data['tenant_id']}), "
        f"expires {data['expires_at']}",
    ]
    if data.get("link"):
        lines.append(f"<{data['link']}|Open the approval>")
    return "\n".join(lines)


class Receiver(ThreadingHTTPServer):
    """POST / with writegate's webhooks; forwards waiting approvals to `slack_url`."""

    def __init__(self, secret: str, slack_url: str, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.webhook = Webhook(secret)
        self.slack = httpx.Client(timeout=httpx.Timeout(5.0))
        self.slack_url = slack_url
        self.seen: set[str] = set()
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/"

    def handle_event(self, body: str, headers: dict[str, str]) -> int:
        """The HTTP status to answer: 401 unsigned, 204 done, 502 try again later."""
        try:
            event = self.webhook.verify(body, headers)
        except WebhookVerificationError:
            return 401
        msg_id = {k.lower(): v for k, v in headers.items()}["webhook-id"]
        with self.lock:
            if msg_id in self.seen:
                return 204  # a duplicate delivery of a message already forwarded
        if event["type"] in WAITING:
            try:
                answer = self.slack.post(self.slack_url, json={"text": slack_text(event)})
            except httpx.HTTPError:
                return 502
            if answer.status_code >= 300:
                return 502
        with self.lock:
            self.seen.add(msg_id)
        return 204

    def start(self) -> Receiver:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", "0"))).decode()
        status = self.server.handle_event(body, dict(self.headers.items()))
        self.send_response(status)
        self.send_header("content-length", "0")
        self.end_headers()


def main() -> None:
    port = int(os.environ.get("PORT", "8787"))
    receiver = Receiver(os.environ["WEBHOOK_SECRET"], os.environ["SLACK_WEBHOOK_URL"], port)
    print(json.dumps({"listening": receiver.url}))
    receiver.serve_forever()


if __name__ == "__main__":
    main()
