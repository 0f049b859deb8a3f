"""The tool registry and the base class every tool entry is built on.

A tool declares its name, description, argument model, side effect and whether it
needs a person's approval; nothing about a tool is inferred from its name. The base
class turns the argument model into a strict JSON schema and turns raw model output
into canonical arguments; subclasses add the business validator, the preview, the
read or the local write, and the downstream call if there is one.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict
from pydantic import ValidationError as PydanticValidationError

from writegate.approval.errors import ValidationFailed
from writegate.approval.models import Preview, SideEffect
from writegate.approval.spec import DownstreamResult, ToolContext, ToolSpec, Validated

# JSON-schema keywords that strict function calling does not accept everywhere; the
# limits they carry are still enforced by `normalize` and stated in the descriptions.
_UNPORTABLE_KEYWORDS = frozenset(
    {"title", "default", "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum",
     "exclusiveMaximum", "pattern"}
)  # fmt: skip


class StrictArgs(BaseModel):
    """Base for argument models: no extra keys, no type coercion, trimmed strings."""

    model_config = ConfigDict(extra="forbid", strict=True, str_strip_whitespace=True)


_SCHEMAS: dict[type[BaseModel], dict[str, Any]] = {}


def strict_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema in the strict subset: closed objects, every field required.

    Generated once per model (pydantic takes about a millisecond for it, and every answer
    to a question reads it); each caller gets its own copy.
    """
    schema = _SCHEMAS.get(model)
    if schema is None:
        schema = _SCHEMAS[model] = _tighten(model.model_json_schema())
    return copy.deepcopy(schema)


def _tighten(node: Any) -> Any:
    if isinstance(node, list):
        return [_tighten(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _tighten(value) for key, value in node.items() if key not in _UNPORTABLE_KEYWORDS}
    if isinstance(node.get("properties"), dict):
        # Property names are data, not keywords: a field called "title" must survive.
        out["properties"] = {name: _tighten(sub) for name, sub in node["properties"].items()}
    if out.get("type") == "object" or "properties" in out:
        out.setdefault("properties", {})
        out["required"] = list(out["properties"])
        out["additionalProperties"] = False
    return out


def openai_function(tool: ToolSpec) -> dict[str, Any]:
    """The OpenAI function spec for one tool, with its strict schema."""
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.json_schema(),
            "strict": True,
        },
    }


def _field_name(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(arguments)"


class Tool(ToolSpec):
    """One tool entry. Concrete tools must declare `side_effect` and `requires_approval`."""

    name: str
    description: str
    args_model: type[StrictArgs]
    side_effect: SideEffect
    requires_approval: bool
    _MUST_DECLARE: ClassVar[tuple[str, ...]] = ("side_effect", "requires_approval")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # A tool that names itself must say for itself whether it needs approval:
        # inheriting that answer by accident is how a write slips through unconfirmed.
        if "name" in vars(cls):
            missing = [attr for attr in cls._MUST_DECLARE if attr not in vars(cls)]
            if missing:
                raise TypeError(f"tool {cls.__name__} must declare {', '.join(missing)}")

    # -- arguments ----------------------------------------------------------------------

    def json_schema(self) -> dict[str, Any]:
        return strict_schema(self.args_model)

    def clarify(self, raw: dict[str, Any]) -> None:
        """Raise ClarificationNeeded when something only the user can supply is missing."""

    def normalize(self, raw: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(raw, dict):
            raise ValidationFailed(f"{self.name} takes a JSON object of arguments")
        # Trimmed before validation too, so that " CNY " meets the closed enum as "CNY".
        trimmed = {key: v.strip() if isinstance(v, str) else v for key, v in raw.items()}
        self.clarify(trimmed)
        try:
            parsed = self.args_model.model_validate(trimmed, strict=True)
        except PydanticValidationError as exc:
            problems = [
                {"field": _field_name(err["loc"]), "problem": err["msg"], "type": err["type"]}
                for err in exc.errors(include_url=False, include_input=False)
            ]
            summary = "; ".join(f"{p['field']}: {p['problem']}" for p in problems)
            raise ValidationFailed(
                f"invalid arguments for {self.name}: {summary}", fields=problems
            ) from None
        return parsed.model_dump(mode="json")

    # -- behaviour; each kind of tool overrides what applies to it ----------------------

    def _unsupported(self, what: str) -> ValidationFailed:
        kind = "read" if self.side_effect is SideEffect.NONE else "write"
        return ValidationFailed(f"{self.name} is a {kind} tool and has no {what}")

    def validate(self, ctx: ToolContext, args: dict[str, Any]) -> Validated:
        raise self._unsupported("proposal step")

    def preview(self, args: dict[str, Any], seen: Validated) -> Preview:
        raise self._unsupported("preview")

    def read(self, ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        raise self._unsupported("read step")

    def apply(
        self, ctx: ToolContext, args: dict[str, Any], *, expected_version: int, request_key: str
    ) -> dict[str, Any]:
        raise self._unsupported("write step")

    @property
    def has_downstream(self) -> bool:
        return False

    def call_downstream(self, args: dict[str, Any], request_key: str) -> DownstreamResult:
        raise self._unsupported("downstream system")

    def lookup_downstream(self, args: dict[str, Any], request_key: str) -> DownstreamResult | None:
        raise self._unsupported("downstream system")

    def on_downstream_success(
        self, ctx: ToolContext, args: dict[str, Any], request_key: str, result: DownstreamResult
    ) -> None:
        return None  # most tools keep nothing beside the ledger's record

    def compensate(self, ctx: ToolContext, args: dict[str, Any], request_key: str) -> None:
        raise self._unsupported("downstream system to compensate for")


class Registry:
    """The tools one service offers, by name; implements `approval.spec.ToolLookup`."""

    def __init__(self, tools: Iterable[ToolSpec] = ()) -> None:
        self._tools: dict[str, ToolSpec] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: ToolSpec) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is registered twice")
        # The service reads tools that need no approval directly; a tool with a side
        # effect must therefore require approval, and a pure read must not.
        if (tool.side_effect is SideEffect.NONE) == tool.requires_approval:
            raise ValueError(
                f"tool {tool.name!r}: side effect {tool.side_effect.value!r} with "
                f"requires_approval={tool.requires_approval} is not allowed"
            )
        self._tools[tool.name] = tool

    def get(self, name: str) -> ToolSpec:
        return self._tools[name]  # KeyError for an unknown name, as ToolLookup promises

    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self) -> list[ToolSpec]:
        return list(self._tools.values())

    def openai_tools(self) -> list[dict[str, Any]]:
        return [openai_function(tool) for tool in self._tools.values()]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)
