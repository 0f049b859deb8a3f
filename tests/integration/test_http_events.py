"""The agent's turn streams Server-Sent Events, and the OpenAPI document describes
each one: its name and the schema of its data. Every event of real turns (a refund
that stops at an approval, a greeting that ends) matches its documented schema."""

from __future__ import annotations

import json
from typing import Any

from fastapi.testclient import TestClient
from jsonschema import Draft202012Validator

from tests.integration.http_fixtures import make_key, new_order

STREAM = "/v1/threads/{thread_id}/messages"


def raw_events(text: str) -> list[dict[str, str]]:
    """Each event as sent: its name and its data, still JSON text."""
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        events.append({"event": lines["event"], "data": lines["data"]})
    return events


class Events:
    """The stream's events as the served document describes them."""

    def __init__(self, document: dict[str, Any]) -> None:
        media = document["paths"][STREAM]["post"]["responses"]["200"]["content"]
        item = media["text/event-stream"]["itemSchema"]
        self.components = document["components"]
        self.envelope = self.validator(item)
        union = self.resolve(item)
        self.variants = {
            name: self.resolve({"$ref": ref})
            for name, ref in union["discriminator"]["mapping"].items()
        }

    def validator(self, schema: dict[str, Any]) -> Draft202012Validator:
        return Draft202012Validator({**schema, "components": self.components})

    def resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        return self.components["schemas"][schema["$ref"].rsplit("/", 1)[1]]

    def problems(self, event: dict[str, str]) -> list[str]:
        found = [e.message for e in self.envelope.iter_errors(event)]
        data_schema = self.variants[event["event"]]["properties"]["data"]["contentSchema"]
        data = json.loads(event["data"])
        return found + [e.message for e in self.validator(data_schema).iter_errors(data)]


def test_every_streamed_event_matches_its_documented_schema(client: TestClient, url: str) -> None:
    events = Events(client.get("/openapi.json").json())
    assert set(events.variants) == {"token", "message", "approval", "end", "error"}
    who = {"Authorization": "Bearer " + make_key(url, "user_42")}
    seen: list[str] = []
    for text in (f"refund 10.00 CNY of {new_order(url)} because it arrived broken", "hello"):
        thread = client.post("/v1/threads", headers=who).json()["thread_id"]
        reply = client.post(STREAM.format(thread_id=thread), headers=who, json={"content": text})
        for event in raw_events(reply.text):
            assert events.problems(event) == [], event
            seen.append(event["event"])
    assert {"message", "approval", "end"} <= set(seen), seen
    bad = {"event": "approval", "data": json.dumps({"proposal_id": 7})}
    assert events.problems(bad), "the documented schema must refuse a bad event"
