"""A tiny counter domain for unit tests of the protocol on the in-memory store."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from writegate.approval.errors import NotFound, StateChanged, ValidationFailed, WritegateError
from writegate.approval.models import Preview, SideEffect
from writegate.approval.spec import DownstreamResult, ToolContext, ToolSpec, Validated


@dataclass
class Counters:
    """The fake "database": counter values and versions, plus downstream effects."""

    values: dict[str, int] = field(default_factory=lambda: {"c1": 0, "c2": 0})
    versions: dict[str, int] = field(default_factory=lambda: {"c1": 1, "c2": 1})
    owners: dict[str, str] = field(default_factory=lambda: {"c1": "alice", "c2": "bob"})
    confirmed: int = 0  # downstream successes recorded locally


class AddTool(ToolSpec):
    """add(counter_id, amount): a write with an optional downstream."""

    name = "add"
    description = "add to a counter"
    side_effect = SideEffect.EXTERNAL
    requires_approval = True

    def __init__(self, downstream: bool = True) -> None:
        self._downstream = downstream
        self.effects: dict[str, dict[str, Any]] = {}  # request_key -> applied call
        self.calls = 0
        self.script: list[WritegateError | None] = []  # errors to raise on next calls

    def json_schema(self) -> dict[str, Any]:
        return {"type": "object", "additionalProperties": False}

    def normalize(self, raw: dict[str, Any]) -> dict[str, Any]:
        if set(raw) != {"counter_id", "amount"} or type(raw["amount"]) is not int:
            raise ValidationFailed("need counter_id and an integer amount")
        return {"counter_id": str(raw["counter_id"]), "amount": raw["amount"]}

    def validate(self, ctx: ToolContext, args: dict[str, Any]) -> Validated:
        db: Counters = ctx.conn
        cid = args["counter_id"]
        if db.owners.get(cid) != ctx.identity.user_id:
            raise NotFound(resource=cid)
        return Validated(resource=f"counter:{cid}", state_version=db.versions[cid])

    def preview(self, args: dict[str, Any], seen: Validated) -> Preview:
        fields = [{"name": k, "value": v, "display": str(v)} for k, v in args.items()]
        return Preview(
            "Add", self.name, seen.resource, fields, "adds", self.side_effect, True, True
        )

    def read(self, ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def apply(
        self, ctx: ToolContext, args: dict[str, Any], *, expected_version: int, request_key: str
    ) -> dict[str, Any]:
        db: Counters = ctx.conn
        cid = args["counter_id"]
        if db.versions[cid] != expected_version:
            raise StateChanged(expected=expected_version, actual=db.versions[cid])
        db.values[cid] += args["amount"]
        db.versions[cid] += 1
        return {"value": db.values[cid]}

    @property
    def has_downstream(self) -> bool:
        return self._downstream

    def call_downstream(self, args: dict[str, Any], request_key: str) -> DownstreamResult:
        self.calls += 1
        if self.script:
            error = self.script.pop(0)
            if error is not None:
                if error.code == "upstream_timeout":  # applied, then the answer was lost
                    self.effects.setdefault(request_key, args)
                raise error
        self.effects.setdefault(request_key, args)  # idempotent by key, like a provider
        return DownstreamResult(provider_ref="ref_" + request_key[-6:], result={"ok": True})

    def lookup_downstream(self, args: dict[str, Any], request_key: str) -> DownstreamResult | None:
        if request_key in self.effects:
            return DownstreamResult(provider_ref="ref_" + request_key[-6:], result={"ok": True})
        return None

    def on_downstream_success(
        self, ctx: ToolContext, args: dict[str, Any], request_key: str, result: DownstreamResult
    ) -> None:
        ctx.conn.confirmed += 1

    def compensate(self, ctx: ToolContext, args: dict[str, Any], request_key: str) -> None:
        db: Counters = ctx.conn
        db.values[args["counter_id"]] -= args["amount"]
        db.versions[args["counter_id"]] += 1


class Tools:
    def __init__(self, *specs: Any) -> None:
        self.by_name = {s.name: s for s in specs}

    def get(self, name: str) -> Any:
        return self.by_name[name]

    def names(self) -> list[str]:
        return list(self.by_name)
