"""Hostile text over HTTP: control characters, lone surrogates and deep nesting in a
message or an edit are refused as 422 validation_failed, never a 500, and the approval
and its thread go on working afterwards.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.integration.http_fixtures import (
    make_key,
    new_order,
    provider_refunds,
    sse_events,
)
from tests.integration.test_http_api import assert_error, decide, propose_refund

JSON = {"Content-Type": "application/json"}


# `url` and `client` come from tests/integration/conftest.py, one seeded database a module.


@pytest.fixture(scope="module")
def alice(url: str) -> dict[str, str]:
    return {"Authorization": "Bearer " + make_key(url, "user_42")}


def _nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


# Raw JSON text, so a lone surrogate travels exactly as a hostile client sends it.
HOSTILE_REASONS = {
    "nul": '"broken\\u0000"',
    "escape": '"\\u001b[1A\\u001b[2K amount: 6.00"',
    "backspace": '"ok\\b\\b\\b"',
    "surrogate": '"broken\\ud800"',
    "deep": json.dumps(_nested(700)),
}


def _edit_body(order: str, reason_json: str) -> bytes:
    args = f'"order_id": "{order}", "amount_minor": 500, "currency": "CNY"'
    return ('{"action": "edit", "args": {' + args + ', "reason": ' + reason_json + "}}").encode()


@pytest.mark.parametrize("case", sorted(HOSTILE_REASONS))
def test_a_hostile_edit_is_refused_and_the_approval_still_confirms(
    client: TestClient, url: str, alice: dict[str, str], case: str
) -> None:
    order = new_order(url)
    _, pid = propose_refund(client, alice, order)
    for attempt in ("a", "b"):  # refused each time, never a stored 500
        r = client.post(
            f"/v1/approvals/{pid}/decision",
            headers={**alice, "Idempotency-Key": f"hostile-{case}-{attempt}", **JSON},
            content=_edit_body(order, HOSTILE_REASONS[case]),
        )
        assert r.status_code == 422, r.text
        assert_error(r.json(), "validation_failed")
    status, done = decide(client, alice, pid, f"hostile-{case}-confirm")
    assert status == 200 and done["outcome"] == "executed", done
    assert provider_refunds(url, order) == 1


@pytest.mark.parametrize(
    "content", ['"hi\\u001b]0;owned\\u0007"', '"hi\\ud800"', '"carriage\\rreturn\\b"']
)
def test_a_hostile_message_is_refused_and_the_thread_goes_on(
    client: TestClient, alice: dict[str, str], content: str
) -> None:
    thread = client.post("/v1/threads", headers=alice).json()["thread_id"]
    r = client.post(
        f"/v1/threads/{thread}/messages",
        headers={**alice, **JSON},
        content=('{"content": ' + content + "}").encode(),
    )
    assert r.status_code == 422, r.text
    assert_error(r.json(), "validation_failed")
    ordinary = "hello\n\tthere"
    more = client.post(f"/v1/threads/{thread}/messages", headers=alice, json={"content": ordinary})
    assert more.status_code == 200 and sse_events(more.text)[-1][1]["status"] == "done"


def test_a_hostile_decline_reason_or_retyped_value_is_refused_and_changes_nothing(
    client: TestClient, url: str, alice: dict[str, str]
) -> None:
    order = new_order(url)
    _, pid = propose_refund(client, alice, order)
    bodies = [
        '{"action": "decline", "reason": "no\\u001b[2K\\rfine"}',
        '{"action": "decline", "reason": "no\\ud800"}',
        '{"action": "confirm", "retyped": "1.00\\b\\b\\b\\b100.00"}',
    ]
    for n, raw in enumerate(bodies):
        r = client.post(
            f"/v1/approvals/{pid}/decision",
            headers={**alice, "Idempotency-Key": f"hostile-decision-{n}", **JSON},
            content=raw.encode(),
        )
        assert r.status_code == 422, r.text
        assert_error(r.json(), "validation_failed")
    pending = client.get("/v1/approvals", headers=alice).json()["approvals"]
    assert pid in [a["proposal_id"] for a in pending]  # still waiting, undecided
    status, done = decide(client, alice, pid, "hostile-decision-confirm")
    assert status == 200 and done["outcome"] == "executed", done
    assert provider_refunds(url, order) == 1
