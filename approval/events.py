"""Events that leave writegate, their deliveries and the rules of sending them.

An event is a row of the outbox, written by the database in the transaction of the
state change that caused it (`checkpoints/schema.py`, the outbox migration), one per endpoint
of the proposal's tenant; `approval/delivery.py` sends them (docs/webhooks.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class EventType(StrEnum):
    """What happened; each is written once per proposal (or execution) and endpoint."""

    AWAITING_CONFIRMATION = "proposal.awaiting_confirmation"  # a question is waiting
    AWAITING_SECOND_APPROVAL = "proposal.awaiting_second_approval"  # an approver must act
    EXPIRING = "proposal.expiring"  # still unanswered, and expires within the window
    ESCALATED = "execution.escalated"  # the outcome is unknown: a person must settle it
    SUCCEEDED = "execution.succeeded"  # the write executed; the event carries the receipt


EVENT_TYPES = tuple(t.value for t in EventType)


@dataclass(frozen=True)
class DeliveryPolicy:
    """How a deliverer sends: the lease outlasts the request's timeout, so a live send
    is never taken over; a failed send waits `backoff` seconds, doubled per attempt up
    to `backoff_max`. Nothing is given up: `failing_after` attempts only list it."""

    lease: float = 60.0
    timeout: float = 10.0
    backoff: float = 5.0
    backoff_max: float = 3600.0
    failing_after: int = 3

    def retry_in(self, attempts: int) -> float:
        """Seconds before the next attempt of a delivery that failed `attempts` times."""
        return min(self.backoff * 2 ** max(attempts - 1, 0), self.backoff_max)


@dataclass(frozen=True)
class Due:
    """A delivery claimed by one deliverer: this event, for this endpoint."""

    delivery_id: int
    event_id: str
    event_type: str
    endpoint_id: str
    url: str
    secret: str
    attempts: int  # including this one
    payload: dict[str, Any]


@dataclass(frozen=True)
class Sent:
    """What the endpoint answered: `status` (None when no answer came), or `error`."""

    status: int | None
    error: str | None = None

    @property
    def accepted(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    def describe(self) -> str:
        if self.error:
            return self.error[:500]
        return f"HTTP {self.status}"


@dataclass(frozen=True)
class Round:
    """One deliverer round: what was written for expiring approvals, sent and failed."""

    expiring: int = 0
    delivered: int = 0
    failed: int = 0


def approval_link(base_url: str | None, proposal_id: str | None) -> str | None:
    """Where a person reads the proposal: the HTTP service's approval, under `base_url`."""
    if not base_url or not proposal_id:
        return None
    return f"{base_url.rstrip('/')}/v1/approvals/{proposal_id}"


def body_of(due: Due, base_url: str | None) -> str:
    """The JSON body sent (and signed): the stored event, with the link to its proposal."""
    data = dict(due.payload.get("data") or {})
    data["link"] = approval_link(base_url, data.get("proposal_id"))
    body = {**due.payload, "data": data}
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
