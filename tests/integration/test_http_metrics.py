"""`/metrics` answers without a key, by decision: it holds only bounded labels (route
templates, methods, statuses, operations, decision actions), never a tenant, a user,
an argument value, a proposal id or a request key. This test pins that after a real
confirmed refund whose every identifying value is distinctive."""

from __future__ import annotations

import secrets

from fastapi.testclient import TestClient

from tests.integration.http_fixtures import make_key, new_order, provider_refunds, sse_events


def test_metrics_hold_no_tenant_user_or_argument_value(url: str, client: TestClient) -> None:
    order = new_order(url)
    who = {"Authorization": "Bearer " + make_key(url, "user_42")}
    reason = "broken " + secrets.token_hex(6)
    thread = client.post("/v1/threads", headers=who).json()["thread_id"]
    reply = client.post(
        f"/v1/threads/{thread}/messages",
        headers=who,
        json={"content": f"refund 1.00 CNY of {order} because {reason}"},
    )
    (approval,) = [data for kind, data in sse_events(reply.text) if kind == "approval"]
    pid = approval["proposal_id"]
    decided = client.post(
        f"/v1/approvals/{pid}/decision",
        headers={**who, "Idempotency-Key": secrets.token_hex(8)},
        json={"action": "confirm"},
    )
    assert decided.status_code == 200, decided.text
    assert provider_refunds(url, order) == 1
    receipt = decided.json()["receipt"]
    assert receipt["execution_id"] and receipt["request_key"]

    scraped = client.get("/metrics")  # no key
    assert scraped.status_code == 200
    text = scraped.text
    assert "writegate_http_requests_total" in text and "writegate_execute_requests" in text
    secrets_of_the_write = [
        "tenant_hz",
        "user_42",
        order,
        reason,
        thread,
        pid,
        receipt["execution_id"],
        receipt["request_key"],
    ]
    for value in secrets_of_the_write:
        assert value not in text, f"{value!r} appears in /metrics"
