"""The real peer: LangChain's `create_agent` with its `HumanInTheLoopMiddleware`, and
writegate's own middleware in the same `create_agent`.

    create_agent(model, [refund_order], middleware=[HumanInTheLoopMiddleware(...)])
    create_agent(model, [refund_order], middleware=[wg.middleware()])

The same scripted model, the same `refund_order` tool as the naive baseline (the same
domain write and provider call, no ledger) and the same saver. The middleware pauses
each `refund_order` call on an interrupt; the person answers LangChain's way,
`{"decisions": [{"type": "approve"}]}`. Needs the `langchain` extra
(`uv sync --extra langchain`); without it the bench leaves these graphs out.

With `wg.middleware()` the agent, model, tool list and saver are the same; the
middleware answers the `refund_order` call itself (propose, `interrupt()` with the
preview, then decide and execute through the ledger, which runs the domain's own
`refund_order` with its request key), so the plain tool's function is never called.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

from langchain_core.runnables import Runnable
from langgraph.checkpoint.base import BaseCheckpointSaver

from writegate.bench.baseline import refund_tool
from writegate.checkpoints.pool import Pool
from writegate.demo.provider import ProviderClient
from writegate.runtime.wiring import Runtime
from writegate.runtime.writegate import Writegate

APPROVE = {"decisions": [{"type": "approve"}]}


def available() -> bool:
    # find_spec of a submodule raises when its parent package is missing: ask in turn.
    return (
        importlib.util.find_spec("langchain") is not None
        and importlib.util.find_spec("langchain.agents") is not None
    )


def build_langchain_hitl(
    pool: Pool,
    provider: ProviderClient,
    model: Runnable[Any, Any],
    checkpointer: BaseCheckpointSaver[Any],
    on_domain: Callable[[float], None] | None = None,
) -> Any:
    from langchain.agents import create_agent
    from langchain.agents.middleware import HumanInTheLoopMiddleware

    hitl = HumanInTheLoopMiddleware(interrupt_on={"refund_order": True})
    chat_model: Any = model  # create_agent wants a BaseChatModel: the scripted one is
    return create_agent(
        chat_model,
        [refund_tool(pool, provider, on_domain)],
        middleware=[hitl],
        checkpointer=checkpointer,
        name="langchain_hitl",
    )


def build_writegate_middleware(
    runtime: Runtime,
    provider: ProviderClient,
    model: Runnable[Any, Any],
    checkpointer: BaseCheckpointSaver[Any],
) -> Any:
    from langchain.agents import create_agent

    middleware = Writegate(runtime, []).middleware()  # the runtime's registry: refund_order
    chat_model: Any = model
    return create_agent(
        chat_model,
        [refund_tool(runtime.pool, provider)],
        middleware=[middleware],
        checkpointer=checkpointer,
        name="writegate_middleware",
    )
