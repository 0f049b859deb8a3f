"""Who is acting, from the host — never from model arguments or a resume.

The host says it in one of two places: `config["configurable"]` (`user_id`,
`tenant_id`, optional `roles` and `trust`), or LangGraph's run context (`context=` on
`invoke`, read from the run's `Runtime.context`; how LangChain v1 agents carry it), as
a mapping or an object with those attributes. Both set and disagreeing is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.config import CONFIG_KEY_RUNTIME

from writegate.approval.models import Identity

_KEYS = ("user_id", "tenant_id", "roles", "trust")


class MissingIdentity(RuntimeError):
    """The host did not say who is acting; writegate never guesses it."""


def _context_of(config: RunnableConfig) -> dict[str, Any]:
    runtime = (config.get("configurable") or {}).get(CONFIG_KEY_RUNTIME)
    context = getattr(runtime, "context", None)
    if context is None:
        return {}
    if isinstance(context, Mapping):
        return {key: context.get(key) for key in _KEYS}
    return {key: getattr(context, key, None) for key in _KEYS}


def _who(source: Mapping[str, Any]) -> tuple[str, str] | None:
    user, tenant = source.get("user_id"), source.get("tenant_id")
    if isinstance(user, str) and user and isinstance(tenant, str) and tenant:
        return user, tenant
    return None


def identity_of(config: RunnableConfig) -> Identity:
    """User and tenant from the run config or the run context, never the model's."""
    conf = config.get("configurable") or {}
    context = _context_of(config)
    by_conf, by_context = _who(conf), _who(context)
    if by_conf and by_context and by_conf != by_context:
        raise MissingIdentity("the run config and the run context name different users")
    if not (by_conf or by_context):
        raise MissingIdentity(
            "set user_id and tenant_id from your authenticated session, in "
            "config['configurable'] or in the run context, before running writegate"
        )
    source: Mapping[str, Any] = conf if by_conf else context
    roles = source.get("roles") or ()
    trust = source.get("trust")  # the host's judgement of user and device; feeds the risk tier
    user, tenant = by_conf or by_context or ("", "")
    return Identity(user, tenant, frozenset(roles), trust if isinstance(trust, str) else None)


def thread_of(config: RunnableConfig) -> str:
    thread = (config.get("configurable") or {}).get("thread_id")
    return str(thread) if thread else "no-thread"
