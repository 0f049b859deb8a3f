"""A turn's `token` events: a model that streams sends its text as it comes, before the
whole message; a model that answers in one piece sends the message only (the service
asks LangGraph for no token stream then: `graph.model.streams_tokens`)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.fakes.openai_server import FakeOpenAIServer
from tests.integration.http_fixtures import make_key, sse_events
from writegate.demo.runtime import open_demo
from writegate.graph.model import openai_chat_model
from writegate.surfaces.web import create_app

STREAM = "/v1/threads/{thread_id}/messages"
TEXT = "Hello there: which order should I look at for you today?"


def _turn(client: TestClient, who: dict[str, str], text: str) -> list[tuple[str, object]]:
    thread = client.post("/v1/threads", headers=who).json()["thread_id"]
    reply = client.post(STREAM.format(thread_id=thread), headers=who, json={"content": text})
    assert reply.status_code == 200, reply.text
    return sse_events(reply.text)


def test_a_streaming_model_sends_token_events_and_a_one_piece_model_none(url: str) -> None:
    runtime = open_demo(url, setup=False).runtime
    who = {"Authorization": "Bearer " + make_key(url, "user_tokens")}
    try:
        with FakeOpenAIServer(chunk_size=7) as server:
            server.enqueue_text(TEXT)
            model = openai_chat_model(runtime.registry.openai_tools(), env=server.env())
            with TestClient(create_app(runtime, model=model)) as client:
                events = _turn(client, who, "hello")
        kinds = [kind for kind, _ in events]
        deltas = [data["delta"] for kind, data in events if kind == "token"]  # type: ignore[index]
        assert len(deltas) > 1 and "".join(deltas) == TEXT
        said = [d for k, d in events if k == "message" and d["role"] == "assistant"]  # type: ignore[index]
        assert [m["content"] for m in said] == [TEXT]  # type: ignore[index]
        assert kinds.index("token") < kinds.index("message", kinds.index("token"))
        assert kinds[-1] == "end"

        with TestClient(create_app(runtime)) as client:  # the demo's scripted model
            events = _turn(client, who, "hello")
        assert [k for k, _ in events if k == "token"] == []
        said = [d for k, d in events if k == "message" and d["role"] == "assistant"]  # type: ignore[index]
        assert len(said) == 1 and said[0]["content"]  # type: ignore[index]
    finally:
        runtime.close()
