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

The optional steps around the function are `Hooks` (see `write_tool` for each one):
asking the user for what only they can supply, reshaping and freezing the arguments
before they are confirmed, and, for a write with a downstream call, a local step in the
confirming transaction with its bookkeeping on success and its undo on a refusal.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any
from weakref import WeakKeyDictionary

from writegate.approval.downstream import RetryPolicy
from writegate.approval.errors import ClarificationNeeded, StateChanged, Unprotected
from writegate.approval.models import Identity, Preview, SideEffect
from writegate.approval.money import amount_display
from writegate.approval.spec import DownstreamResult, ToolContext, Validated, acting_identity
from writegate.tools.registry import StrictArgs, Tool

# What the decorators accept from the tool's author.
Resource = Callable[[dict[str, Any]], str]
Validator = Callable[..., "int | Checked"]  # (args, identity[, *, conn])
Lookup = Callable[[dict[str, Any], str], "dict[str, Any] | None"]
# What the downstream applied since a moment, by the request key each call carried.
AppliedSince = Callable[[datetime], Mapping[str, dict[str, Any]]]
# What one call puts at stake, for the policy's tiers: its amount as (minor units,
# currency code), e.g. (123456, "EUR") for EUR 1,234.56; or how many things it changes.
AmountOf = Callable[[dict[str, Any]], tuple[int, str]]
"""`write_tool(amount=...)`: what a call moves, as (minor units, ISO currency code)."""
ScopeOf = Callable[[dict[str, Any]], int]
"""`write_tool(scope=...)`: how many things one call changes."""
# Each step a hook may add; `call_hook` hands it the keywords it declares of
# conn, identity, request_key and expected_version.
Clarify = Callable[[dict[str, Any]], Mapping[str, str]]  # raw -> {missing field: question}
Normalize = Callable[[dict[str, Any]], dict[str, Any]]  # checked args -> canonical args
Step = Callable[..., Any]
# (the function's parameters by name, request key or None for a read, identity, the
# keyword-only values writegate offers: "conn", "expected_version", "confirmed_args")
Runner = Callable[[dict[str, Any], "str | None", Identity, dict[str, Any]], Any]


def takes(func: Callable[..., Any], name: str) -> bool:
    """Whether a function or hook declares the keyword-only parameter `name`."""
    return name in _keyword_only(func)


def _keyword_only(func: Callable[..., Any]) -> frozenset[str]:
    """A function's keyword-only parameter names, read once per function: a hook is
    called on every write, and `inspect.signature` costs more than most hooks."""
    try:
        return _KEYWORD_ONLY[func]
    except (KeyError, TypeError):  # TypeError: an unhashable callable, never cached
        pass
    names = frozenset(
        p.name
        for p in inspect.signature(func).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    )
    with suppress(TypeError):
        _KEYWORD_ONLY[func] = names
    return names


_KEYWORD_ONLY: WeakKeyDictionary[Callable[..., Any], frozenset[str]] = WeakKeyDictionary()


def call_hook(hook: Callable[..., Any], *args: Any, **offered: Any) -> Any:
    """Call a hook with those of the `offered` keywords it declares."""
    declared = _keyword_only(hook)
    return hook(*args, **{key: value for key, value in offered.items() if key in declared})


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
    money_of: str | None = None  # an amount in minor units; names the field of its currency

    def to_dict(self) -> dict[str, Any]:
        shown = self.display if self.display is not None else _shown(self.value)
        out: dict[str, Any] = {"name": self.name, "value": self.value, "display": shown}
        if self.label is not None:
            out["label"] = self.label
        if self.options is not None:
            out["options"] = list(self.options)
        if self.identifies:
            out["identifies"] = True
        if self.money_of is not None:
            out["money_of"] = self.money_of
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


@dataclass(frozen=True)
class Hooks:
    """A tool's optional steps besides its function; `write_tool` documents each one."""

    resource: Resource | None = None
    preview: Callable[..., ToolPreview] | None = None
    validate: Validator | None = None
    lookup: Lookup | None = None
    applied_since: AppliedSince | None = None
    amount: AmountOf | None = None
    scope: ScopeOf | None = None
    clarify: Clarify | None = None
    normalize: Normalize | None = None
    freeze: Step | None = None
    prepare: Step | None = None
    on_success: Step | None = None
    compensate: Step | None = None

    @property
    def reshape(self) -> bool:
        """Whether the confirmed arguments may differ in shape from the typed ones."""
        return self.normalize is not None or self.freeze is not None


@dataclass(frozen=True)
class Delivery:
    """How a write's downstream call is bounded and repeated (see `write_tool`)."""

    retry: RetryPolicy | None = None  # None: the one given to Writegate.open
    dedupes_by_key: bool = False  # the downstream drops a repeated request key


def _json_object(value: Any, hook: str, tool: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"{tool}: {hook}= must return a dict of JSON values")
    return value


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
        hooks: Hooks | None = None,
        local: bool = False,
        delivery: Delivery | None = None,
        expires_in: timedelta | None = None,
    ) -> None:
        self.name = name
        self.description = description
        self.args_model = args_model
        self.side_effect = side_effect
        self.requires_approval = side_effect is not SideEffect.NONE
        self._run = run
        self.hooks = hooks or Hooks()
        self._local = local  # runs in the ledger's transaction, on its connection
        delivery = delivery or Delivery()
        # Optional hooks of approval/spec.py's ToolSpec, read by the executor and reconciler.
        self.retry = delivery.retry
        self.dedupes_by_key = delivery.dedupes_by_key
        self.expires_in = expires_in  # how long its proposals wait; None: the policy's

    def arguments(self, args: dict[str, Any]) -> dict[str, Any]:
        """The function's parameters from the canonical arguments: typed as declared, or,
        when `normalize=` / `freeze=` reshaped them, taken by name as they are."""
        if self.hooks.reshape:
            return {key: args.get(key) for key in self.args_model.model_fields}
        typed = self.args_model.model_validate(args)
        return {key: getattr(typed, key) for key in self.args_model.model_fields}

    # -- arguments ----------------------------------------------------------------------

    def clarify(self, raw: dict[str, Any]) -> None:
        if self.hooks.clarify is None:
            return
        questions = dict(self.hooks.clarify(raw) or {})
        if questions:
            raise ClarificationNeeded(
                "ask the user: " + " ".join(questions.values()),
                missing=list(questions),
                questions=list(questions.values()),
            )

    def normalize(self, raw: dict[str, Any]) -> dict[str, Any]:
        args = super().normalize(raw)
        if self.hooks.normalize is None:
            return args
        return _json_object(self.hooks.normalize(args), "normalize", self.name)

    def freeze_scope(self, ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        """At proposal time: what `freeze=` fixes now joins the arguments to confirm."""
        if self.hooks.freeze is None:
            return args
        scope = call_hook(self.hooks.freeze, args, conn=ctx.conn, identity=ctx.identity)
        return {**args, **_json_object(scope, "freeze", self.name)}

    @property
    def declared_stakes(self) -> frozenset[str]:
        """The risk inputs `risk_inputs` fills for every call: `amount_minor` (`amount=`),
        `count` (`scope=`); a tier's re-typed field falls back on them."""
        declared = {"amount_minor"} if self.hooks.amount is not None else set()
        return frozenset(declared | ({"count"} if self.hooks.scope is not None else set()))

    def risk_inputs(self, args: dict[str, Any]) -> dict[str, Any]:
        """What the tool declared is at stake (`amount=`, `scope=`), for the tiers."""
        declared: dict[str, Any] = {}
        if self.hooks.amount is not None:
            found = self.hooks.amount(args)
            minor, currency = found if isinstance(found, tuple) and len(found) == 2 else (0, 0)
            if type(minor) is not int or not isinstance(currency, str) or not currency.strip():
                raise TypeError(
                    f"{self.name}: amount= must return (minor units as int, currency code), "
                    f"got {found!r}"
                )
            declared.update(amount_minor=minor, currency=currency.strip().upper())
        if self.hooks.scope is not None:
            count = self.hooks.scope(args)
            if type(count) is not int:
                raise TypeError(f"{self.name}: scope= must return an int count, got {count!r}")
            declared["count"] = count
        return declared

    # -- read -------------------------------------------------------------------------

    def read(self, ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        if self.requires_approval:
            raise self._unsupported("read step")
        values = self.arguments(args)
        return as_json_dict(self._run(values, None, ctx.identity, {"conn": ctx.conn}))

    # -- propose ------------------------------------------------------------------------

    def _check(
        self, ctx: ToolContext, args: dict[str, Any], expected_version: int | None = None
    ) -> Checked:
        if self.hooks.validate is None:
            return Checked(0)
        # `expected_version` is None when proposed, the confirmed version when executed.
        seen = call_hook(
            self.hooks.validate,
            args,
            ctx.identity,
            conn=ctx.conn,
            expected_version=expected_version,
        )
        checked = Checked(seen) if type(seen) is int else seen
        if not isinstance(checked, Checked) or type(checked.version) is not int:
            raise TypeError(f"{self.name}: validate= must return the int version it saw")
        return checked

    def validate(self, ctx: ToolContext, args: dict[str, Any]) -> Validated:
        resource = self.hooks.resource(args) if self.hooks.resource else self.name
        checked = self._check(ctx, args)
        return Validated(str(resource), checked.version, checked.facts)

    def preview(self, args: dict[str, Any], seen: Validated) -> Preview:
        if self.hooks.preview is not None:
            shown = call_hook(self.hooks.preview, args, facts=seen.facts)
        else:
            fields = [PreviewField(key, value) for key, value in args.items()]
            shown = ToolPreview(
                self._money_shown(fields, args),
                f"{self.name} runs once with exactly these arguments.",
            )
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

    def _money_shown(self, fields: list[PreviewField], args: dict[str, Any]) -> list[PreviewField]:
        """The default preview's fields, the declared amount's (`amount=`) shown as a
        person reads it (`EUR 1,000,000.00`): the argument holding that figure, next to
        the one holding its currency, keeps its exact machine value."""
        if self.hooks.amount is None:
            return fields
        declared = self.risk_inputs(args)
        minor, currency = declared["amount_minor"], declared["currency"]
        at = next((f for f in fields if type(f.value) is int and f.value == minor), None)
        if at is None:
            return fields  # computed from several arguments: the tier's reasons show it
        money_of = next(
            (f.name for f in fields if isinstance(f.value, str) and f.value.upper() == currency),
            None,
        )
        shown = replace(at, display=amount_display(minor, currency), money_of=money_of)
        return [shown if f is at else f for f in fields]

    # -- execute ------------------------------------------------------------------------

    def apply(
        self, ctx: ToolContext, args: dict[str, Any], *, expected_version: int, request_key: str
    ) -> dict[str, Any]:
        if not self.requires_approval:
            raise self._unsupported("write step")
        # Inside the transaction that consumes the confirmation: the state must still be
        # what the person saw, or nothing runs and the token stays unused.
        current = self._check(ctx, args, expected_version).version
        if current != expected_version:
            raise StateChanged(expected_version=expected_version, current_version=current)
        offered = {"conn": ctx.conn, "expected_version": expected_version}
        if self._local:  # its rows commit with this transaction or not at all
            given = {**offered, "confirmed_args": args}
            return as_json_dict(self._run(self.arguments(args), request_key, ctx.identity, given))
        if self.hooks.prepare is None:
            return {}
        # The downstream call's local part (e.g. a reservation), committed before it runs.
        prepared = call_hook(
            self.hooks.prepare, args, identity=ctx.identity, request_key=request_key, **offered
        )
        return {} if prepared is None else as_json_dict(prepared)

    @property
    def has_downstream(self) -> bool:
        return self.requires_approval and not self._local

    @property
    def has_lookup(self) -> bool:
        return self.hooks.lookup is not None

    def call_downstream(self, args: dict[str, Any], request_key: str) -> DownstreamResult:
        if not self.has_downstream:
            raise self._unsupported("downstream system")
        given = {"confirmed_args": args}
        return _as_result(self._run(self.arguments(args), request_key, _acting(), given))

    def lookup_downstream(self, args: dict[str, Any], request_key: str) -> DownstreamResult | None:
        if self.hooks.lookup is None:
            raise self._unsupported("lookup")
        found = self.hooks.lookup(args, request_key)
        return None if found is None else _as_result(found)

    @property
    def has_applied_since(self) -> bool:
        return self.hooks.applied_since is not None

    def applied_downstream_since(self, since: datetime) -> dict[str, dict[str, Any]]:
        if self.hooks.applied_since is None:
            raise self._unsupported("listing of what the downstream applied")
        listed = self.hooks.applied_since(since)
        return {
            str(key): _json_object(record, "applied_since", self.name)
            for key, record in dict(listed).items()
        }

    def on_downstream_success(
        self, ctx: ToolContext, args: dict[str, Any], request_key: str, result: DownstreamResult
    ) -> None:
        if self.hooks.on_success is not None:
            offered = {"conn": ctx.conn, "identity": ctx.identity, "request_key": request_key}
            call_hook(self.hooks.on_success, args, result.result, **offered)

    def compensate(self, ctx: ToolContext, args: dict[str, Any], request_key: str) -> None:
        if self.hooks.compensate is not None:  # else nothing was written locally to undo
            offered = {"conn": ctx.conn, "identity": ctx.identity, "request_key": request_key}
            call_hook(self.hooks.compensate, args, **offered)
