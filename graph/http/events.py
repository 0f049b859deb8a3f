"""The events of a turn's stream (Server-Sent Events), as the OpenAPI document shows them.

A stream is text, so its response schema stays a string; its `itemSchema` (the
OpenAPI 3.2 way to describe one event of a sequential media type) is `ThreadEvent`:
each event's name and the schema of its JSON data, told apart by the name.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter

from graph.http.schemas import ApprovalView, ErrorBody, MessageView, _Out


class TokenData(_Out):
    message_id: str | None
    delta: str = Field(description="The next piece of the assistant's text.")


class TurnEnd(_Out):
    status: Literal["done", "awaiting_approval"]
    pending: list[ApprovalView] = Field(description="The approvals waiting for a decision.")


class TokenEvent(_Out):
    event: Literal["token"]
    data: TokenData


class MessageEvent(_Out):
    event: Literal["message"]
    data: MessageView


class ApprovalEvent(_Out):
    event: Literal["approval"]
    data: ApprovalView


class EndEvent(_Out):
    """The last event of a turn that ended or stopped at an approval."""

    event: Literal["end"]
    data: TurnEnd


class ErrorEvent(_Out):
    """The last event of a turn that failed."""

    event: Literal["error"]
    data: ErrorBody


ThreadEvent = Annotated[
    TokenEvent | MessageEvent | ApprovalEvent | EndEvent | ErrorEvent,
    Field(discriminator="event"),
]
REF = "#/components/schemas/{model}"

STREAM_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Server-Sent Events, each `event: <name>` with `data: <JSON>`: "
        "`token`, `message` and `approval` while the turn runs, then `end` (or `error`).",
        "content": {
            "text/event-stream": {
                "schema": {"type": "string"},
                "itemSchema": {"$ref": REF.format(model="ThreadEvent")},
            }
        },
    }
}


def add_event_schemas(document: dict[str, Any]) -> None:
    """Put ThreadEvent and the models it names into the document's components."""
    schema = TypeAdapter(ThreadEvent).json_schema(ref_template=REF, mode="serialization")
    components = document.setdefault("components", {}).setdefault("schemas", {})
    for name, definition in schema.pop("$defs", {}).items():
        components.setdefault(name, definition)
    components["ThreadEvent"] = schema
