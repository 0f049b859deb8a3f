"""The agent's turn streams Server-Sent Events, and the OpenAPI document describes
each one: its name and the schema of its data. Every event of real turns (a refund
that stops at an approval, a greeting that ends) matches its documented schema."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from jsonschema import Draft202012Validator

from tests.integration.http_fixtures import ThreadServer, make_key, new_order
from writegate.demo.runtime import open_demo
from writegate.surfaces.web import create_app

STREAM = "/v1/threads/{thread_id}/messages"


def raw_events(text: str) -> list[dict[str, str]]:
    """Each event as sent: its id, its name and its data, still JSON text."""
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in lines:  # a block of comment lines only is a keep-alive
            events.append({"id": lines["id"], "event": lines["event"], "data": lines["data"]})
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


@pytest.fixture(scope="module")
def replicas(url: str) -> Iterator[tuple[str, str]]:
    """Two servers with their own runtimes (pools) on one database: two replicas."""
    first, second = open_demo(url, setup=False).runtime, open_demo(url, setup=False).runtime
    with ThreadServer(create_app(first)) as a, ThreadServer(create_app(second)) as b:
        yield a.url, b.url
    first.close()
    second.close()


def _first_event_then_cut(base: str, thread: str, who: dict[str, str], text: str) -> str:
    """Post a message, read up to the first event, and drop the connection: its id."""
    with (
        httpx.Client(base_url=base, timeout=30) as http,
        http.stream(
            "POST", STREAM.format(thread_id=thread), headers=who, json={"content": text}
        ) as reply,
    ):
        assert reply.status_code == 200
        received = ""
        for chunk in reply.iter_text():
            received += chunk
            if "\n\n" in received:
                break
    first = raw_events(received.split("\n\n", 1)[0] + "\n\n")
    assert len(first) == 1, received
    return first[0]["id"]


def test_a_client_that_reconnects_to_another_replica_gets_the_rest_once(
    replicas: tuple[str, str], url: str
) -> None:
    one, other = replicas
    who = {"Authorization": "Bearer " + make_key(url, "user_42")}
    thread = httpx.post(f"{one}/v1/threads", headers=who).json()["thread_id"]
    text = f"refund 10.00 CNY of {new_order(url)} because it arrived broken"
    last = _first_event_then_cut(one, thread, who, text)

    rest = httpx.get(
        f"{other}/v1/threads/{thread}/events",
        headers={**who, "Last-Event-ID": last},
        timeout=30,
    )
    assert rest.status_code == 200, rest.text
    events = raw_events(rest.text)
    stream_id, first_seq = last.rsplit(":", 1)
    ids = [last] + [e["id"] for e in events]
    assert ids == [f"{stream_id}:{n}" for n in range(int(first_seq), len(ids))], ids
    names = [e["event"] for e in events]
    assert names[-1] == "end", names
    assert names.count("approval") == 1, names
    pending = json.loads(events[-1]["data"])["pending"]
    assert len(pending) == 1

    again = httpx.get(
        f"{one}/v1/threads/{thread}/events",
        headers={**who, "Last-Event-ID": events[-2]["id"]},
        timeout=30,
    )
    assert [e["id"] for e in raw_events(again.text)] == [events[-1]["id"]]


def test_a_reconnect_names_a_stream_of_this_thread_or_is_refused(
    client: TestClient, url: str
) -> None:
    who = {"Authorization": "Bearer " + make_key(url, "user_42")}
    mine = client.post("/v1/threads", headers=who).json()["thread_id"]
    other = client.post("/v1/threads", headers=who).json()["thread_id"]
    reply = client.post(STREAM.format(thread_id=mine), headers=who, json={"content": "hello"})
    last = raw_events(reply.text)[0]["id"]
    wrong_thread = client.get(f"/v1/threads/{other}/events", headers={**who, "Last-Event-ID": last})
    assert wrong_thread.status_code == 404
    assert wrong_thread.json()["code"] == "not_found"
    garbage = client.get(f"/v1/threads/{mine}/events", headers={**who, "Last-Event-ID": "x:y"})
    assert garbage.status_code == 422
    assert garbage.json()["code"] == "validation_failed"
    stranger = {"Authorization": "Bearer " + make_key(url, "user_7")}
    theirs = client.get(f"/v1/threads/{mine}/events", headers={**stranger, "Last-Event-ID": last})
    assert theirs.status_code == 404
