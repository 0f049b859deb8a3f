"""The MCP tool catalogue built from the registry.

A read tool is listed as it is, with its strict schema and `readOnlyHint`. A write
tool `<tool>` becomes two tools with their own schemas:

- `request_<tool>_confirmation`: the tool's own arguments (plus an optional
  `client_request_id`); it creates a proposal and asks the person; it never executes.
- `execute_confirmed_<tool>`: `proposal_id` and `confirmation_token` only.

Annotations are hints to the client about the side-effect level; the server enforces
the protocol regardless of what a client does with them. No schema has a user or
tenant field: identity comes from the session.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Literal

import mcp_types as types

from writegate.approval.models import SideEffect
from writegate.approval.spec import ToolSpec
from writegate.tools.registry import Registry

REQUEST_PREFIX, REQUEST_SUFFIX = "request_", "_confirmation"
EXECUTE_PREFIX = "execute_confirmed_"

Kind = Literal["read", "request", "execute"]

CLIENT_REQUEST_ID = "client_request_id"
_CLIENT_REQUEST_ID_SCHEMA = {
    "type": "string",
    "description": (
        "Optional. Your own id for this business request. Leave it out to have the "
        "arguments identify the request: repeating the same arguments in this session "
        "returns the same proposal. Pass a new id only to ask for a second, separate "
        "operation with identical arguments."
    ),
}
EXECUTE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "proposal_id": {"type": "string", "description": "The proposal id to execute."},
        "confirmation_token": {
            "type": "string",
            "description": "The one-time token issued when the person confirmed.",
        },
    },
    "required": ["proposal_id", "confirmation_token"],
    "additionalProperties": False,
}


@dataclass(frozen=True)
class Route:
    """What an MCP tool name stands for."""

    kind: Kind
    spec: ToolSpec


def request_name(tool: str) -> str:
    return f"{REQUEST_PREFIX}{tool}{REQUEST_SUFFIX}"


def execute_name(tool: str) -> str:
    return f"{EXECUTE_PREFIX}{tool}"


def routes(registry: Registry) -> dict[str, Route]:
    out: dict[str, Route] = {}
    for spec in registry.specs():
        if spec.requires_approval:
            out[request_name(spec.name)] = Route("request", spec)
            out[execute_name(spec.name)] = Route("execute", spec)
        else:
            out[spec.name] = Route("read", spec)
    return out


def _request_schema(spec: ToolSpec) -> dict[str, Any]:
    schema = copy.deepcopy(spec.json_schema())
    schema["properties"][CLIENT_REQUEST_ID] = _CLIENT_REQUEST_ID_SCHEMA
    return schema


def _write_hints(spec: ToolSpec) -> types.ToolAnnotations:
    return types.ToolAnnotations(
        read_only_hint=False,
        # Overwrites or money leaving the building; a reversible create/update is not.
        destructive_hint=spec.side_effect in (SideEffect.IRREVERSIBLE, SideEffect.EXTERNAL),
        # One proposal and one token run once: repeating the call adds no effect.
        idempotent_hint=True,
        # What the tool declares it touches, not how it is wired: a `write_tool` function
        # is always a downstream call, even one that writes a service of your own.
        open_world_hint=spec.side_effect is SideEffect.EXTERNAL,
    )


def mcp_tool(name: str, route: Route) -> types.Tool:
    spec = route.spec
    if route.kind == "read":
        return types.Tool(
            name=name,
            description=spec.description,
            input_schema=spec.json_schema(),
            annotations=types.ToolAnnotations(
                title=spec.name,
                read_only_hint=True,
                destructive_hint=False,
                idempotent_hint=True,
                open_world_hint=False,
            ),
        )
    if route.kind == "request":
        return types.Tool(
            name=name,
            description=(
                f"Ask the person to confirm `{spec.name}`: {spec.description} "
                "This tool only creates a confirmation proposal with an exact preview and "
                "asks the person; it does NOT execute anything. After the person confirms, "
                f"call {execute_name(spec.name)} with the proposal_id and the "
                "confirmation_token. Never claim the person agreed on their behalf."
            ),
            input_schema=_request_schema(spec),
            annotations=types.ToolAnnotations(
                title=f"Request confirmation: {spec.name}",
                read_only_hint=False,  # it records a pending proposal, nothing else
                destructive_hint=False,
                idempotent_hint=True,
                open_world_hint=False,
            ),
        )
    return types.Tool(
        name=name,
        description=(
            f"Execute `{spec.name}` exactly as the person confirmed it, at most once. "
            f"Needs the proposal_id from {request_name(spec.name)} and the one-time "
            "confirmation_token the person's confirmation produced. Calling it again "
            "returns the same receipt; it never runs twice."
        ),
        input_schema=copy.deepcopy(EXECUTE_SCHEMA),
        annotations=_write_hints(spec).model_copy(update={"title": f"Execute: {spec.name}"}),
    )


def catalogue(registry: Registry) -> list[types.Tool]:
    return [mcp_tool(name, route) for name, route in routes(registry).items()]
