"""A tool's arguments from its function or its LangChain tool, and how to call it.

The arguments have a strict schema (closed object, every field required) built from the
type hints and the Google-style docstring, which `wg.build_agent()` and
`wg.middleware()` send the model; writegate's service checks every call against it. Two
keyword-only parameters are filled by writegate, never by the model: `request_key` (a
write's idempotency key, to pass downstream) and `identity` (who the call acts for, from
the host's run context). A third, `conn`, makes a write local: the function then runs
inside writegate's own transaction, on its connection, right after the version check
(see `tools/kit_spec.py`); such a function may also take `expected_version`, the version
the person confirmed, to guard its own statement with it. Any write function may take
`confirmed_args`: the whole canonical arguments as the person confirmed them, including
what a `normalize=` or `freeze=` hook made of them (a batch's frozen set and versions,
say).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, create_schema_from_function
from pydantic import BaseModel, create_model

from writegate.approval.models import Identity
from writegate.tools.kit_spec import Runner
from writegate.tools.registry import StrictArgs

INJECTED = ("request_key", "identity", "conn", "expected_version", "confirmed_args")


def strict_model(name: str, source: type[BaseModel]) -> type[StrictArgs]:
    """The same fields on `StrictArgs`: no extra keys, no coercion, trimmed strings."""
    fields: dict[str, Any] = {
        key: (info.annotation, info)
        for key, info in source.model_fields.items()
        if key not in INJECTED
    }
    model: type[StrictArgs] = create_model(name, __base__=StrictArgs, **fields)
    return model


def from_function(
    func: Callable[..., Any], name: str, *, write: bool
) -> tuple[type[StrictArgs], str, Runner]:
    """Argument model, description and runner of a plain (sync or async) function."""
    params = inspect.signature(func).parameters
    for key in INJECTED:
        if key in params and params[key].kind is not inspect.Parameter.KEYWORD_ONLY:
            raise TypeError(f"{name}: `{key}` must be keyword-only (put it after `*`)")
    if "expected_version" in params and not (write and "conn" in params):
        raise TypeError(f"{name}: only a local write (one taking `conn`) gets `expected_version`")
    if write and "request_key" not in params:
        raise TypeError(
            f"{name}: a write tool takes `*, request_key: str` and passes it downstream "
            "as the idempotency key"
        )
    for key in ("request_key", "confirmed_args"):
        if not write and key in params:
            raise TypeError(f"{name}: a read tool has no `{key}`")
    source = create_schema_from_function(
        name, func, filter_args=list(INJECTED), parse_docstring=True
    )
    assert issubclass(source, BaseModel)  # pydantic v2: what create_schema_from_function makes
    description = " ".join((source.__doc__ or "").split()) or name
    model = strict_model(name, source)
    wants = {key for key in INJECTED if key in params}

    def run(
        values: dict[str, Any], request_key: str | None, identity: Identity, local: dict[str, Any]
    ) -> Any:
        kwargs = dict(values)
        given = {"request_key": request_key, "identity": identity, **local}
        kwargs.update({key: given.get(key) for key in wants})
        if inspect.iscoroutinefunction(func):  # we run in a worker thread, off any loop
            return asyncio.run(func(**kwargs))
        return func(**kwargs)

    return model, description, run


def from_langchain(tool: BaseTool, *, write: bool) -> tuple[type[StrictArgs], str, Runner]:
    """Argument model, description and runner of an existing LangChain tool.

    The request key reaches the tool as its `request_key` argument when it declares one
    (annotated `InjectedToolArg`, so the model never sees it), and always as
    `config["configurable"]["request_key"]`, beside `user_id` and `tenant_id`.
    """
    visible = tool.tool_call_schema
    if not (isinstance(visible, type) and issubclass(visible, BaseModel)):
        raise TypeError(f"{tool.name}: wrap a tool whose arguments are a pydantic model")
    if "request_key" in visible.model_fields:
        raise TypeError(
            f"{tool.name}: annotate `request_key` as InjectedToolArg so the model cannot set it"
        )
    takes_key = "request_key" in getattr(tool.get_input_schema(), "model_fields", {})
    model = strict_model(tool.name, visible)

    def run(
        values: dict[str, Any], request_key: str | None, identity: Identity, local: dict[str, Any]
    ) -> Any:
        kwargs: dict[str, Any] = dict(values)
        if takes_key and write:
            kwargs["request_key"] = request_key
        configurable = {"user_id": identity.user_id, "tenant_id": identity.tenant_id}
        if write:
            configurable["request_key"] = str(request_key)
        config: RunnableConfig = {"configurable": configurable}
        if getattr(tool, "func", True) is None:  # an async-only tool: we run off any loop
            return asyncio.run(tool.ainvoke(kwargs, config=config))
        return tool.invoke(kwargs, config=config)

    return model, tool.description, run
