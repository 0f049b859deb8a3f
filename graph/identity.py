"""Who is acting, from the host's run config — never from model arguments or a resume."""

from __future__ import annotations

from langchain_core.runnables import RunnableConfig

from writegate.approval.models import Identity


class MissingIdentity(RuntimeError):
    """The host did not say who is acting; writegate never guesses it."""


def identity_of(config: RunnableConfig) -> Identity:
    """User and tenant come from the host's run config, never from the model or a resume."""
    conf = config.get("configurable") or {}
    user, tenant = conf.get("user_id"), conf.get("tenant_id")
    if not isinstance(user, str) or not user or not isinstance(tenant, str) or not tenant:
        raise MissingIdentity(
            "set config['configurable']['user_id'] and ['tenant_id'] from your "
            "authenticated session before running the writegate graph"
        )
    roles = conf.get("roles") or ()
    trust = conf.get("trust")  # the host's judgement of user and device; feeds the risk tier
    return Identity(user, tenant, frozenset(roles), trust if isinstance(trust, str) else None)


def thread_of(config: RunnableConfig) -> str:
    thread = (config.get("configurable") or {}).get("thread_id")
    return str(thread) if thread else "no-thread"
