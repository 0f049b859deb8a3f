"""`write_tool` and `read_tool`: protect anyone's tool with writegate's protocol.

What they return is a LangChain `BaseTool` (so it goes into `Writegate.open(tools=...)`,
an agent's tool list or a `ToolNode` alike) that carries its protocol adapter as
`.spec`. Called outside writegate (a plain `ToolNode`, `.invoke` directly) a write tool
refuses with a structured `unprotected` error and runs nothing: only the executor runs
its function, after a person confirmed. A read tool runs once it is registered with a
Writegate, audited like every call.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import fields
from datetime import timedelta
from typing import Any, Required, TypedDict, Unpack, overload

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, ToolException
from pydantic import Field

from writegate.approval.downstream import RetryPolicy
from writegate.approval.errors import Unprotected, WritegateError
from writegate.approval.models import Identity, SideEffect
from writegate.approval.service import ApprovalService
from writegate.tools.kit_args import from_function, from_langchain
from writegate.tools.kit_spec import (
    AmountOf,
    AppliedSince,
    CallableTool,
    Clarify,
    Delivery,
    Hooks,
    Lookup,
    Normalize,
    Resource,
    ScopeOf,
    Step,
    ToolPreview,
    Validator,
    takes,
)
from writegate.tools.registry import openai_function

# How a registered read tool learns who calls it: the graph layer hands these in.
Identify = Callable[[RunnableConfig], Identity]
ThreadOf = Callable[[RunnableConfig], str]


def _content(body: dict[str, Any]) -> str:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), default=str)


def _refusal(exc: WritegateError) -> ToolException:
    return ToolException(_content(exc.to_dict()))


class GuardedTool(BaseTool):
    """A LangChain tool whose calls go through writegate; `.spec` is its protocol view."""

    spec: Any = Field(exclude=True)
    handle_tool_error: bool = True  # a refusal becomes an error ToolMessage, not a crash
    binding: Any = Field(default=None, exclude=True)

    def attach(self, service: ApprovalService, identify: Identify, thread_of: ThreadOf) -> None:
        """Registered with a Writegate: reads run (audited) through its service."""
        self.binding = (service, identify, thread_of)

    def openai_tool(self) -> dict[str, Any]:
        """This tool as the OpenAI function spec writegate binds a model to (strict:
        closed objects, every field required), for a model you bind yourself:
        `model.bind_tools([tool.openai_tool() for tool in tools], strict=True)`."""
        return openai_function(self.spec)

    def _parse_input(
        self, tool_input: str | dict[str, Any], tool_call_id: str | None
    ) -> str | dict[str, Any]:
        """Arguments pass as given: writegate's service checks them (strictly, and
        audited, for a read), so a refusal is a structured error, never a validation
        trace that LangChain's tool node turns into free text."""
        if isinstance(tool_input, dict):
            return dict(tool_input)
        return super()._parse_input(tool_input, tool_call_id)

    def _run(self, *, config: RunnableConfig, **kwargs: Any) -> str:
        spec: CallableTool = self.spec
        if spec.requires_approval or self.binding is None:
            raise _refusal(Unprotected(tool=self.name))
        service, identify, thread_of = self.binding
        identity = identify(config)  # none: the run fails, nothing is read
        try:
            result = service.read(identity, self.name, kwargs, thread_id=thread_of(config))
        except WritegateError as exc:
            raise _refusal(exc) from None
        return _content(result if "status" in result else {"status": "ok", **result})


def _declare(
    target: Callable[..., Any] | BaseTool,
    name: str | None,
    effect: SideEffect,
    hooks: Hooks,
    delivery: Delivery | None = None,
    expires_in: timedelta | None = None,
) -> GuardedTool:
    write, local = effect is not SideEffect.NONE, False
    if isinstance(target, BaseTool):
        tool_name = name or target.name
        model, description, run = from_langchain(target, write=write)
    else:
        tool_name = name or target.__name__
        model, description, run = from_function(target, tool_name, write=write)
        local = write and takes(target, "conn")
    around = [key for key in ("prepare", "on_success", "compensate") if getattr(hooks, key)]
    if local and delivery is not None:
        around += [key for key in ("retry", "dedupes_by_key") if getattr(delivery, key)]
    if local and around:
        raise TypeError(
            f"{tool_name}: {', '.join(key + '=' for key in around)} go with a downstream "
            "call; a local write (one taking `conn`) does its bookkeeping in its function"
        )
    spec = CallableTool(
        name=tool_name,
        description=description,
        args_model=model,
        side_effect=effect,
        run=run,
        hooks=hooks,
        local=local,
        delivery=delivery,
        expires_in=expires_in,
    )
    return GuardedTool(name=tool_name, description=description, args_schema=model, spec=spec)


Target = Callable[..., Any] | BaseTool


class WriteToolOptions(TypedDict, total=False):
    """What `write_tool` takes besides the function: `side_effect`, and the rest as needed.

    Each hook may declare the keyword-only values it needs of `conn` (writegate's
    transaction), `identity`, `request_key` and `expected_version`, where they exist.
    """

    side_effect: Required[str | SideEffect]
    """"reversible", "irreversible" or "external"; it goes into the preview and the tier."""
    resource: Resource
    """`resource(args) -> str`: the target, e.g. "order:ord_1" (default: the tool name);
    bound into the confirmation and the request key."""
    preview: Callable[..., ToolPreview]
    """`preview(args) -> ToolPreview`: fields and impact (default: each argument as is);
    with a keyword-only `facts` it also gets the facts `validate` returned."""
    validate: Validator
    """`validate(args, identity) -> int`: ownership and current state; returns the
    version it saw, or raises NotFound / StateChanged / ValidationFailed. Runs when
    proposed and again right before execution: another version refuses the write. It
    may take `*, conn` (writegate's transaction) and return `Checked(version, facts)`."""
    lookup: Lookup
    """`lookup(args, request_key) -> dict | None`: did this key apply downstream? The
    result if so, None if never seen. Without it, an unknown outcome (a timeout, a lost
    answer) is escalated to a person and never sent again."""
    applied_since: AppliedSince
    """`applied_since(since) -> {request_key: record}`: what the downstream applied since
    `since` (a datetime), each under the request key its call carried, with what the
    downstream says about it (e.g. its reference and amount). Asked after a failover,
    for keys applied shortly before the promotion: one the ledger has no record of (the
    commits that held it were lost) is escalated to a person. Without it such an effect
    is not found (docs/operations.md)."""
    dedupes_by_key: bool
    """True: the downstream drops a repeated request key (applies it once, answers the
    first result again). Only then is a call that may have applied (the client timed
    out, the connection broke) sent again, with the same key; never while an earlier
    attempt may still be running."""
    retry: RetryPolicy
    """This tool's deadline per call and its retries (default: `Writegate.open`'s)."""
    amount: AmountOf
    """`amount(args) -> (minor_units, currency)`: what the call moves, e.g.
    `lambda a: (a["total_cents"], a["currency"])`; the policy scores it by its amount
    bands (unset: only arguments named `amount_minor` and `currency` count)."""
    scope: ScopeOf
    """`scope(args) -> int`: how many things one call changes, scored by the policy's
    count bands, e.g. `lambda a: len(a["recipients"])`."""
    expires_in: timedelta
    """How long a proposal waits for its decision, e.g. `timedelta(hours=2)` (default:
    the policy's, 15 minutes as shipped); the policy's `[operations.<name>]
    proposal_ttl_seconds` overrides it."""
    clarify: Clarify
    """`clarify(raw) -> {field: question}`: what only the user can supply and the model
    left out (e.g. the amount); a non-empty answer asks the user, nothing is proposed."""
    normalize: Normalize
    """`normalize(args) -> dict`: the canonical arguments, after the schema check (e.g.
    a set sorted); they are what is digested and confirmed."""
    freeze: Step
    """`freeze(args, *, conn, identity) -> dict`: at proposal time, fixes what the
    arguments stand for (e.g. "all resolved tickets" as the exact ids and versions); the
    keys it returns join the arguments, so the confirmation covers them."""
    prepare: Step
    """With a downstream call only: `prepare(args, *, conn, identity, expected_version,
    request_key)` runs in the transaction that consumes the confirmation, after
    `validate`, before the call (e.g. reserve the amount)."""
    on_success: Step
    """With a downstream call only: `on_success(args, result, *, conn, ...)` runs in the
    transaction that records the downstream's success (found later by `lookup` too)."""
    compensate: Step
    """With a downstream call only: `compensate(args, *, conn, ...)` runs in the one that
    records a final refusal: undo what `prepare` did. Each hook runs once per operation."""
    name: str
    """The tool's name for the model (default: the function's)."""


@overload
def write_tool(func: Target, /, **options: Unpack[WriteToolOptions]) -> GuardedTool: ...
@overload
def write_tool(
    func: None = None, /, **options: Unpack[WriteToolOptions]
) -> Callable[[Target], GuardedTool]: ...
def write_tool(
    func: Target | None = None, /, **options: Unpack[WriteToolOptions]
) -> GuardedTool | Callable[[Target], GuardedTool]:
    """Declare a write tool: proposed, shown, confirmed by a person, run at most once.

    Use as `@write_tool(side_effect="external", ...)` on a function taking its
    arguments plus `*, request_key: str` (and optionally `identity`), or as
    `write_tool(langchain_tool, side_effect=...)`. A function that also takes `conn`
    writes locally: it runs inside writegate's transaction on that connection, after
    `validate` passed again, and commits with the ledger or not at all. The options are
    `WriteToolOptions`, each described there.

    The function raising a writegate error (e.g. StateChanged) means "did not apply";
    `RateLimited` / `TemporarilyUnavailable` (an explicit 429 / 503) mean "not applied,
    try again": the call is sent again with the same key. `UpstreamTimeout` or any other
    exception, or no answer within the deadline, means "may have applied": the outcome
    becomes unknown, for `lookup` or a person.
    """
    unknown = set(options) - set(WriteToolOptions.__annotations__)
    if unknown:
        raise TypeError(f"write_tool() got unexpected options: {', '.join(sorted(unknown))}")
    if "side_effect" not in options:
        raise TypeError("write_tool() needs side_effect: reversible, irreversible or external")
    effect = SideEffect(options["side_effect"])
    if effect is SideEffect.NONE:
        raise ValueError("a write tool's side effect is reversible, irreversible or external")
    expires_in = options.get("expires_in")
    if expires_in is not None and (
        not isinstance(expires_in, timedelta) or expires_in <= timedelta(0)
    ):
        raise ValueError(f"expires_in must be a positive timedelta, got {expires_in!r}")
    hooks = Hooks(**{key: options.get(key) for key in _HOOKS})  # type: ignore[arg-type]
    delivery = Delivery(options.get("retry"), options.get("dedupes_by_key", False))
    name = options.get("name")

    def wrap(target: Target) -> GuardedTool:
        return _declare(target, name, effect, hooks, delivery, expires_in)

    return wrap if func is None else wrap(func)


_HOOKS = tuple(f.name for f in fields(Hooks))


@overload
def read_tool(func: Target, /, *, name: str | None = None) -> GuardedTool: ...
@overload
def read_tool(
    func: None = None, /, *, name: str | None = None
) -> Callable[[Target], GuardedTool]: ...
def read_tool(
    func: Target | None = None, /, *, name: str | None = None
) -> GuardedTool | Callable[[Target], GuardedTool]:
    """Declare a read tool: it runs at once, and every call is audited.

    Use as `@read_tool` (or `@read_tool(name=...)`) on a function, which may take a
    keyword-only `identity` to scope what it reads and `conn`, a connection to
    writegate's database in the transaction that audits the call; or as
    `read_tool(langchain_tool)`.
    """

    def wrap(target: Target) -> GuardedTool:
        return _declare(target, name, SideEffect.NONE, Hooks())

    return wrap if func is None else wrap(func)
