"""The demo application opened: writegate's core over the demo domain's tools, through
the public entry (`Writegate.open`), as the `Writegate` it returns.

What the demo commands (`writegate demo`, `chat`), the commands that serve it on its
database (`serve`, `mcp`, `reconcile`, ..., through `demo/served.py`), the Studio
entry, the tests and the bench run on: writegate's tables and the demo's own
(`demo/schema.py`), the payment provider (the process at WRITEGATE_PROVIDER_URL,
else the in-process simulator), its prompt, and, for fault testing only, the
execution lease (WRITEGATE_EXECUTION_LEASE_SECONDS) and the deadline per call
(WRITEGATE_CALL_TIMEOUT_SECONDS) the environment asks for. The library
(`Writegate.open`) never loads this module.
"""

from __future__ import annotations

import os
from dataclasses import replace
from datetime import timedelta
from typing import Any

from writegate import (
    Pool,
    RetryPolicy,
    Writegate,
    open_pool,
    resolve_database_url,
)
from writegate.demo.domain import domain_tools
from writegate.demo.model import demo_chat_model
from writegate.demo.policy import demo_policy
from writegate.demo.prompt import DEMO_PROMPT
from writegate.demo.provider import ProviderClient, SimulatedProvider
from writegate.demo.provider_http import HttpProvider
from writegate.demo.schema import setup_demo

LEASE_ENV = "WRITEGATE_EXECUTION_LEASE_SECONDS"
CALL_TIMEOUT_ENV = "WRITEGATE_CALL_TIMEOUT_SECONDS"
PROVIDER_ENV = "WRITEGATE_PROVIDER_URL"


def demo_agent(wg: Writegate) -> Any:
    """The demo's agent over `wg` (one `open_demo` opened): its model (bound to the tools
    as it binds them), its prompt, and `wg`'s checkpointer (`writegate demo`, `chat`)."""
    model = demo_chat_model(wg.runtime.registry.openai_tools())
    return wg.build_agent(model, system_prompt=DEMO_PROMPT, bind_tools=False)


def retry_from_env() -> RetryPolicy | None:
    """The default retry policy with the execution lease (LEASE_ENV) and the deadline
    per call (CALL_TIMEOUT_ENV) from the environment, where set; None if neither is."""
    lease = os.environ.get(LEASE_ENV, "").strip()
    deadline = os.environ.get(CALL_TIMEOUT_ENV, "").strip()
    settings: dict[str, Any] = {}
    if lease:
        settings["lease"] = timedelta(seconds=float(lease))
    if deadline:
        settings["call_timeout"] = float(deadline)
    return RetryPolicy(**settings) if settings else None


def default_provider(pool: Pool) -> ProviderClient:
    """The provider process at WRITEGATE_PROVIDER_URL, else the in-process simulator."""
    url = os.environ.get(PROVIDER_ENV, "").strip()
    return HttpProvider(url) if url else SimulatedProvider(pool=pool)


def open_demo(
    url: str | None = None,
    *,
    setup: bool = True,
    provider: ProviderClient | None = None,
    max_connections: int = 10,
    pool: Pool | None = None,
    **options: Any,
) -> Writegate:
    """Open the demo on `url` (resolved as the CLI does when None) through the public
    entry, `Writegate.open`, over the demo's tools: its tables set up unless
    `setup=False`; `options` go to `Writegate.open` (policy, retry, step_hook, ...); the
    policy is the demo's own (`demo/policy.toml`) unless one is given. The pool is opened
    here because the simulated provider shares it (`pool`: one already open on `url`,
    the bench's counting pool). `provider`: where the refunds go, kept by the caller
    that reads it back (None: `default_provider`'s). Its runtime carries the demo's
    prompt and model, for the agent the commands that serve it build."""
    if options.get("policy") is None:
        options["policy"] = demo_policy()  # before the database: a bad file stops here
    url = url or resolve_database_url()
    if setup:
        setup_demo(url)
    pool = pool or open_pool(url, max_size=max_connections)
    provider = provider or default_provider(pool)
    options.setdefault("retry", retry_from_env())
    wg = Writegate.open(url, tools=domain_tools(provider), setup=False, pool=pool, **options)
    runtime = replace(wg.runtime, system_prompt=DEMO_PROMPT, chat_model=demo_chat_model)
    return Writegate(runtime, wg.tools)
