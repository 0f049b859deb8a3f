"""The agent's turn streams Server-Sent Events, and the OpenAPI document describes
each one: its name and the schema of its data. Every event of real turns (a refund
that stops at an approval, a greeting that ends) matches its documented schema."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from jsonschema import Draft202012Validator

from graph.http import create_app
from graph.runtime import Runtime
from tests.integration.http_fixtures import make_key, new_order, seeded_database, sse_events

STREAM = "/v1/threads/{thread_id}/messages"


@pytest.fixture(scope="module")
def url(create_database: Callable[[], str]) -> str:
    return seeded_database(create_database)


@pytest.fixture(scope="module")
def client(url: str) -> Iterator[TestClient]:
    runtime = Runtime.open(url, setup=False)
    with TestClient(create_app(runtime)) as test_client:
        yield test_client
    runtime.close()


def event_validator(document: dict[str, Any]) -> Draft202012Validator:
    """Each event as documented: the stream's item schema, resolved in the document."""
    media = document["paths"][STREAM]["post"]["responses"]["200"]["content"]
    item = media["text/event-stream"]["itemSchema"]
    return Draft202012Validator({**item, "components": document["components"]})


def documented_event_names(document: dict[str, Any]) -> set[str]:
    union = document["components"]["schemas"]["ThreadEvent"]
    return set(union["discriminator"]["mapping"])


def test_every_streamed_event_matches_its_documented_schema(client: TestClient, url: str) -> None:
    document = client.get("/openapi.json").json()
    assert documented_event_names(document) == {"token", "message", "approval", "end", "error"}
    validator = event_validator(document)
    who = {"Authorization": "Bearer " + make_key(url, "user_42")}
    seen: list[str] = []
    for text in (f"refund 10.00 CNY of {new_order(url)} because it arrived broken", "hello"):
        thread = client.post("/v1/threads", headers=who).json()["thread_id"]
        reply = client.post(STREAM.format(thread_id=thread), headers=who, json={"content": text})
        for kind, data in sse_events(reply.text):
            errors = [e.message for e in validator.iter_errors({"event": kind, "data": data})]
            assert errors == [], (kind, data, errors)
            seen.append(kind)
    assert {"message", "approval", "end"} <= set(seen), seen
    bad = {"event": "approval", "data": {"proposal_id": 7}}
    assert list(validator.iter_errors(bad)), "the documented schema must refuse a bad event"
