"""Settings from the environment, and the objects one app instance shares.

One `Runtime` per process (one pool), one compiled graph on the Postgres
checkpointer; everything else is stateless, so replicas share only PostgreSQL.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Annotated, Any

from fastapi import Depends, Request

from writegate.approval.policy import load_policy
from writegate.approval.service import Policy
from writegate.graph.build import build_graph
from writegate.graph.model import env_chat_model, streams_tokens
from writegate.graph.nodes import LIBRARY_PROMPT
from writegate.runtime.wiring import Runtime
from writegate.surfaces.store.http_store import (
    LOCK_CONNECTIONS,
    THREAD_LEASE_ENV,
    THREAD_LEASE_S,
    HttpStore,
)
from writegate.surfaces.store.streams import StreamStore
from writegate.surfaces.web.decide import Decisions
from writegate.surfaces.web.metrics import HttpMetrics
from writegate.surfaces.web.runner import Runner

TTL_ENV = "WRITEGATE_PROPOSAL_TTL_SECONDS"


class SettingsError(ValueError):
    """A setting from the environment is not usable."""


@dataclass(frozen=True)
class Settings:
    database_url: str | None = None
    proposal_ttl_s: float | None = None  # None: the protocol's default (15 minutes)
    decision_lock_wait_s: float = 15.0  # a second click waits this long for the first
    message_lock_wait_s: float = 2.0  # a message waits this long for a busy thread
    lock_connections: int = LOCK_CONNECTIONS  # the bounded pool of thread-lock sessions
    stream_ping_s: float = 15.0  # a keep-alive comment on an event stream this often
    thread_lease_s: float = THREAD_LEASE_S  # a run's hold on its thread (docs/failover.md)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        raw = (env.get(TTL_ENV) or "").strip()
        ttl: float | None = None
        if raw:
            try:
                ttl = float(raw)
            except ValueError as exc:
                raise SettingsError(f"{TTL_ENV} must be a number of seconds") from exc
            if not 0 < ttl <= 7 * 24 * 3600:
                raise SettingsError(f"{TTL_ENV} must be between 0 and one week")
        lease = _seconds(env, THREAD_LEASE_ENV, THREAD_LEASE_S, 3600.0)
        return cls(
            database_url=env.get("DATABASE_URL") or None, proposal_ttl_s=ttl, thread_lease_s=lease
        )

    def policy(self) -> Policy:
        """The policy file every entry point reads (WRITEGATE_POLICY_FILE's, else the
        shipped one), with these settings' proposal lifetime."""
        return self.tune(load_policy())

    def tune(self, base: Policy) -> Policy:
        """`base` with the proposal lifetime these settings ask for, if any."""
        if self.proposal_ttl_s is None:
            return base
        return replace(base, proposal_ttl=timedelta(seconds=self.proposal_ttl_s))


def _seconds(env: Mapping[str, str], name: str, default: float, most: float) -> float:
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise SettingsError(f"{name} must be a number of seconds") from exc
    if not 0 < value <= most:
        raise SettingsError(f"{name} must be between 0 and {most:g} seconds")
    return value


@dataclass
class Services:
    runtime: Runtime
    graph: Any
    store: HttpStore
    runner: Runner
    decisions: Decisions
    settings: Settings
    metrics: HttpMetrics
    streams: StreamStore

    @classmethod
    def build(cls, runtime: Runtime, settings: Settings, model: Any = None) -> Services:
        prompt = runtime.system_prompt or LIBRARY_PROMPT
        if model is None:
            make = runtime.chat_model or env_chat_model
            model = make(runtime.registry.openai_tools())
        graph = build_graph(
            runtime, model=model, checkpointer=runtime.checkpointer, system_prompt=prompt
        )
        store = HttpStore(
            runtime.pool,
            runtime.url,
            lock_connections=settings.lock_connections,
            lease_s=settings.thread_lease_s,
        )
        runner = Runner(runtime, graph, store, tokens=streams_tokens(model))
        decisions = Decisions(runtime, runner, store, settings.decision_lock_wait_s)
        streams = StreamStore(runtime.pool)
        return cls(runtime, graph, store, runner, decisions, settings, HttpMetrics(), streams)

    def close(self) -> None:
        """Close what the app opened itself; the runtime belongs to whoever opened it."""
        self.store.close()


def services(request: Request) -> Services:
    wg: Services = request.app.state.wg
    return wg


async def current_services(request: Request) -> Services:
    """`services` as a route's dependency. A coroutine, since it does no I/O: FastAPI runs
    a plain function's dependency on its thread pool, one hop per request for nothing."""
    return services(request)


Svc = Annotated[Services, Depends(current_services)]
