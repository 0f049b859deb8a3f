"""The events of a turn's stream (Server-Sent Events), as the OpenAPI document shows them.

A stream is text, so its response schema stays a string; its `itemSchema` (the
OpenAPI 3.2 way to describe one event of a sequential media type) is `ThreadEvent`:
each event's name, and its data as JSON text whose `contentSchema` is the data's model.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field
from pydantic.json_schema import models_json_schema

from writegate.surfaces.web.schemas import ApprovalView, ErrorBody, MessageView, OutModel


class TokenData(OutModel):
    message_id: str | None
    delta: str = Field(description="The next piece of the assistant's text.")


class TurnEnd(OutModel):
    status: Literal["done", "awaiting_approval"]
    pending: list[ApprovalView] = Field(description="The approvals waiting for a decision.")


# Each event's name and the model of its JSON data, in the order a turn sends them.
EVENT_DATA: dict[str, type[OutModel]] = {
    "token": TokenData,
    "message": MessageView,
    "approval": ApprovalView,
    "end": TurnEnd,
    "error": ErrorBody,
}
REF = "#/components/schemas/{model}"

STREAM_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Server-Sent Events, each `id: <stream id>:<seq>`, `event: <name>` "
        "and `data: <JSON>`, with a keep-alive comment line every 15 seconds: "
        "`token` (from a model that streams its text), `message` and `approval` while the "
        "turn runs, then `end` after a turn "
        "that ended or stopped at an approval, or `error` after one that failed.",
        "content": {
            "text/event-stream": {
                "schema": {"type": "string"},
                "itemSchema": {"$ref": REF.format(model="ThreadEvent")},
            }
        },
    }
}


def _event_name(event: str) -> str:
    return event.capitalize() + "Event"


def _event_schema(event: str, model: type[OutModel]) -> dict[str, Any]:
    """One event as the stream carries it: its name, and its data as JSON text."""
    return {
        "type": "object",
        "required": ["event", "data"],
        "properties": {
            "id": {
                "type": "string",
                "description": "`<stream id>:<sequence>`; send it back as `Last-Event-ID` "
                "to GET /v1/threads/{thread_id}/events to get the events after it.",
            },
            "event": {"const": event},
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": {"$ref": REF.format(model=model.__name__)},
            },
        },
    }


def add_event_schemas(document: dict[str, Any]) -> None:
    """Put ThreadEvent, its events and the models of their data into the components."""
    models = [(model, "serialization") for model in EVENT_DATA.values()]
    _, defs = models_json_schema(models, ref_template=REF)  # type: ignore[arg-type]
    components = document.setdefault("components", {}).setdefault("schemas", {})
    for name, definition in defs.get("$defs", {}).items():
        components.setdefault(name, definition)
    for event, model in EVENT_DATA.items():
        components[_event_name(event)] = _event_schema(event, model)
    components["ThreadEvent"] = {
        "oneOf": [{"$ref": REF.format(model=_event_name(e))} for e in EVENT_DATA],
        "discriminator": {
            "propertyName": "event",
            "mapping": {e: REF.format(model=_event_name(e)) for e in EVENT_DATA},
        },
    }
