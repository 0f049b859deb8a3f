"""The protocol's view of a tool declared with `write_tool` or `read_tool`.

A write tool's own function is its downstream: the executor calls it once, after the
person confirmed, with the operation's request key, outside any ledger transaction;
a lost answer is looked up with the tool's `lookup`, or escalated to a person when it
has none. Its validator runs at proposal time and again inside the transaction that
consumes the confirmation, so a change of state in between refuses the write.

A function that declares a keyword-only `conn` is a local write instead: it runs inside
that same transaction, on its connection, right after the validator passed again (and
may take `expected_version`, the confirmed version, to guard its own statement), so
its rows commit with the ledger's or not at all, and there is no downstream to lose an
answer. A `validate=` hook may declare `conn` too (to read the state it guards) and
`expected_version` (None when proposed, the confirmed version when executed), and may
return `Checked(version, facts)` whose facts reach a `preview=` hook declaring `facts`.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from writegate.approval.errors import StateChanged, Unprotected
from writegate.approval.models import Identity, Preview, SideEffect
from writegate.approval.spec import DownstreamResult, ToolContext, Validated, acting_identity
from writegate.tools.registry import StrictArgs, Tool

# What the decorators accept from the tool's author.
Resource = Callable[[dict[str, Any]], str]
Validator = Callable[..., "int | Checked"]  # (args, identity[, *, conn])
Lookup = Callable[[dict[str, Any], str], "dict[str, Any] | None"]
# (typed arguments, request key or None for a read, identity, what a local write is
# given: {"conn": the transaction's connection, "expected_version": confirmed}) -> result
Runner = Callable[[StrictArgs, "str | None", Identity, dict[str, Any]], Any]


def takes(func: Callable[..., Any], name: str) -> bool:
    """Whether a function or hook declares the keyword-only parameter `name`."""
    found = inspect.signature(func).parameters.get(name)
    return found is not None and found.kind is inspect.Parameter.KEYWORD_ONLY


def call_hook(hook: Callable[..., Any], *args: Any, **offered: Any) -> Any:
    """Call a hook with those of the `offered` keywords it declares."""
    return hook(*args, **{key: value for key, value in offered.items() if takes(hook, key)})


@dataclass(frozen=True)
class Checked:
    """What a `validate=` hook may return instead of a bare version: the version it saw
    and facts for the preview (e.g. the row's current title), handed to a `preview=`
    hook that declares a keyword-only `facts`."""

    version: int
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PreviewField:
    """One line of the preview: the machine value executed, and what the person reads."""

    name: str
    value: Any
    display: str | None = None
    label: str | None = None  # the word a person reads ("Amount"), instead of the name
    options: Sequence[str] | None = None  # a closed set: the page edits it with a select
    identifies: bool = False  # names the target: changing it would be another operation

    def to_dict(self) -> dict[str, Any]:
        shown = self.display if self.display is not None else _shown(self.value)
        out: dict[str, Any] = {"name": self.name, "value": self.value, "display": shown}
        if self.label is not None:
            out["label"] = self.label
        if self.options is not None:
            out["options"] = list(self.options)
        if self.identifies:
            out["identifies"] = True
        return out


@dataclass(frozen=True)
class ToolPreview:
    """What a `preview=` callable returns: the fields shown and the impact in words."""

    fields: Sequence[PreviewField]
    impact: str
    title: str | None = None
    target: str | None = None


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def as_json_dict(value: Any) -> dict[str, Any]:
    """A tool's return value as the JSON object kept in the receipt."""
    body = value if isinstance(value, dict) else {"output": value}
    loaded = json.loads(json.dumps(body, ensure_ascii=False, default=str))
    assert isinstance(loaded, dict)
    return loaded


def _as_result(value: Any) -> DownstreamResult:
    result = as_json_dict(value)
    ref = result.get("provider_ref")
    return DownstreamResult(provider_ref=ref if isinstance(ref, str) else None, result=result)


def _acting() -> Identity:
    identity = acting_identity()
    if identity is None:  # only the executor and the reconciler set it
        raise Unprotected()
    return identity


class CallableTool(Tool):
    """One user tool as a ToolSpec; the decorators in `tools/kit.py` build it."""

    def __init__(
        self,
        *,
        name: str,
        description: str,
        args_model: type[StrictArgs],
        side_effect: SideEffect,
        run: Runner,
        resource: Resource | None = None,
        preview: Callable[[dict[str, Any]], ToolPreview] | None = None,
        validate: Validator | None = None,
        lookup: Lookup | None = None,
        local: bool = False,
    ) -> None:
        self.name = name
        self.description = description
        self.args_model = args_model
        self.side_effect = side_effect
        self.requires_approval = side_effect is not SideEffect.NONE
        self._run = run
        self._resource = resource
        self._preview = preview
        self._validate = validate
        self._lookup = lookup
        self._local = local  # runs in the ledger's transaction, on its connection

    def typed(self, args: dict[str, Any]) -> StrictArgs:
        """Canonical arguments back as the typed values the function declares."""
        return self.args_model.model_validate(args)

    # -- read -------------------------------------------------------------------------

    def read(self, ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        if self.requires_approval:
            raise self._unsupported("read step")
        return as_json_dict(self._run(self.typed(args), None, ctx.identity, {"conn": ctx.conn}))

    # -- propose ------------------------------------------------------------------------

    def _check(
        self, ctx: ToolContext, args: dict[str, Any], expected_version: int | None = None
    ) -> Checked:
        if self._validate is None:
            return Checked(0)
        # `expected_version` is None when proposed, the confirmed version when executed.
        seen = call_hook(
            self._validate, args, ctx.identity, conn=ctx.conn, expected_version=expected_version
        )
        checked = Checked(seen) if type(seen) is int else seen
        if not isinstance(checked, Checked) or type(checked.version) is not int:
            raise TypeError(f"{self.name}: validate= must return the int version it saw")
        return checked

    def validate(self, ctx: ToolContext, args: dict[str, Any]) -> Validated:
        resource = self._resource(args) if self._resource else self.name
        checked = self._check(ctx, args)
        return Validated(str(resource), checked.version, checked.facts)

    def preview(self, args: dict[str, Any], seen: Validated) -> Preview:
        if self._preview is not None:
            shown = call_hook(self._preview, args, facts=seen.facts)
        else:
            fields = [PreviewField(key, value) for key, value in args.items()]
            shown = ToolPreview(fields, f"{self.name} runs once with exactly these arguments.")
        return Preview(
            title=shown.title or self.description.split("\n")[0][:120] or self.name,
            operation=self.name,
            target=shown.target or seen.resource,
            fields=[field.to_dict() for field in shown.fields],
            impact=shown.impact,
            side_effect=self.side_effect,
            irreversible=self.side_effect is not SideEffect.REVERSIBLE,
            external=self.side_effect is SideEffect.EXTERNAL,
        )

    # -- execute ------------------------------------------------------------------------

    def apply(
        self, ctx: ToolContext, args: dict[str, Any], *, expected_version: int, request_key: str
    ) -> dict[str, Any]:
        # Inside the transaction that consumes the confirmation: the state must still be
        # what the person saw, or nothing runs and the token stays unused.
        current = self._check(ctx, args, expected_version).version
        if current != expected_version:
            raise StateChanged(expected_version=expected_version, current_version=current)
        if self._local:  # its rows commit with this transaction or not at all
            local = {"conn": ctx.conn, "expected_version": expected_version}
            return as_json_dict(self._run(self.typed(args), request_key, ctx.identity, local))
        return {}

    @property
    def has_downstream(self) -> bool:
        return self.requires_approval and not self._local

    @property
    def has_lookup(self) -> bool:
        return self._lookup is not None

    def call_downstream(self, args: dict[str, Any], request_key: str) -> DownstreamResult:
        return _as_result(self._run(self.typed(args), request_key, _acting(), {}))

    def lookup_downstream(self, args: dict[str, Any], request_key: str) -> DownstreamResult | None:
        if self._lookup is None:
            raise self._unsupported("lookup")
        found = self._lookup(args, request_key)
        return None if found is None else _as_result(found)

    def compensate(self, ctx: ToolContext, args: dict[str, Any], request_key: str) -> None:
        return None  # nothing was written locally; the tool's own refusal stands
