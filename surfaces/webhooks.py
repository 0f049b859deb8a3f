"""Webhooks out of the outbox, signed per Standard Webhooks (docs/webhooks.md).

The signature is the `standardwebhooks` library's: `webhook-id` is the event's id (the
same on every attempt and every replay), `webhook-timestamp` the moment of the attempt,
`webhook-signature` the library's `v1,` signature of both and the body, under the
endpoint's `whsec_` secret. Requests go out with httpx, with a timeout shorter than
the deliverer's lease, and never follow a redirect.
"""

from __future__ import annotations

import base64
import binascii
import secrets
import threading
from datetime import UTC, datetime
from urllib.parse import urlsplit

import httpx
from standardwebhooks import Webhook
from standardwebhooks.webhooks import EmptyWebhookSecretError

from writegate.approval.delivery import Deliverer
from writegate.approval.errors import ValidationFailed
from writegate.approval.events import DeliveryPolicy, Due, Sent, body_of
from writegate.checkpoints.outbox import PgOutbox

USER_AGENT = "writegate-webhooks"


def new_secret() -> str:
    """A fresh signing secret in the `whsec_<base64>` form the library reads."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def new_endpoint_id() -> str:
    return "ep_" + secrets.token_hex(8)


def checked_url(url: str) -> str:
    """`url` if it is an absolute http(s) URL with a host; else `ValidationFailed`."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationFailed(f"an endpoint URL must be http:// or https:// with a host: {url!r}")
    return url.strip()


def signed_headers(due: Due, body: str, moment: datetime) -> dict[str, str]:
    """The three Standard Webhooks headers of one attempt, signed by the library."""
    signature = Webhook(due.secret).sign(msg_id=due.event_id, timestamp=moment, data=body)
    return {
        "webhook-id": due.event_id,
        "webhook-timestamp": str(int(moment.timestamp())),
        "webhook-signature": signature,
    }


class HttpSender:
    """Sends one delivery: signed JSON, a bounded wait, any failure as a `Sent`."""

    def __init__(self, policy: DeliveryPolicy, base_url: str | None = None) -> None:
        self.base_url = base_url
        self.client = httpx.Client(
            timeout=httpx.Timeout(policy.timeout), follow_redirects=False,
            headers={"user-agent": USER_AGENT},
        )  # fmt: skip

    def __call__(self, due: Due) -> Sent:
        body = body_of(due, self.base_url)
        try:
            signed = signed_headers(due, body, datetime.now(UTC))
        except (binascii.Error, ValueError, RuntimeError, EmptyWebhookSecretError):
            return Sent(None, "the endpoint's secret is not a whsec_ secret: nothing sent")
        headers = {"content-type": "application/json", **signed}
        try:
            response = self.client.post(due.url, content=body.encode(), headers=headers)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            return Sent(None, f"{type(exc).__name__}: {exc}")
        return Sent(response.status_code)

    def close(self) -> None:
        self.client.close()


def deliverer(
    outbox: PgOutbox, policy: DeliveryPolicy, *, base_url: str | None = None
) -> tuple[Deliverer, HttpSender]:
    """A deliverer on `outbox` with a sender of its own (close the sender after)."""
    sender = HttpSender(policy, base_url)
    owner = f"deliverer-{threading.get_native_id()}-{secrets.token_hex(4)}"
    return Deliverer(outbox, sender, owner, policy), sender


__all__ = ["HttpSender", "checked_url", "deliverer", "new_secret", "signed_headers"]
