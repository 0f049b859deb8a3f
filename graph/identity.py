"""Who is acting, from the host — never from model arguments, a resume, or a server's client.

Under LangGraph Server with an auth handler (`auth` in langgraph.json), the server
authenticates each request and hands its user to the run as
`config["configurable"]["langgraph_auth_user"]`. That user alone says who acts, read
through `ServerUserFields`: by default the user is its `identity`, the tenant its
`tenant_id`, the roles its `roles`, the trust its `trust`. A server user without a
tenant (LangGraph Studio's `langgraph-studio-user`) is refused. The run's configurable
and context come from the client: they may repeat what the server user carries, and a
run in which they name another user or tenant, or roles or a trust the user does not
carry, is refused before anything runs.

Without a server user, the application that invokes the graph is the host and says it
in `config["configurable"]` (`user_id`, `tenant_id`, optional `roles` and `trust`) or in
LangGraph's run context (`context=` on `invoke`, read from the run's `Runtime.context`;
how LangChain v1 agents carry it), as a mapping or an object with those attributes.
Both set and disagreeing is refused. Under LangGraph Server without an auth handler
that is whatever the client sent: whoever reaches the server can act as anyone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.config import CONFIG_KEY_RUNTIME

from writegate.approval.errors import IdentityConflict, MissingIdentity
from writegate.approval.models import Identity
from writegate.runtime.wiring import ServerUserFields

_KEYS = ("user_id", "tenant_id", "roles", "trust")
SERVER_USER = "langgraph_auth_user"  # set by LangGraph Server; clients cannot set it
SERVER_USER_ID = "langgraph_auth_user_id"


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


def identity_of(config: RunnableConfig, fields: ServerUserFields | None = None) -> Identity:
    """Who acts in this run: the server's authenticated user if there is one (read
    through `fields`), else the host's run config or run context; never the model's."""
    conf = config.get("configurable") or {}
    context = _context_of(config)
    if conf.get(SERVER_USER) is not None:
        identity = server_identity(conf[SERVER_USER], fields or ServerUserFields())
        also = {str(conf.get(SERVER_USER_ID) or identity.user_id)}  # the server's own fill
        for where, claims in (("configurable", conf), ("context", context)):
            check_claims(identity, claims, where, also_user=also)
        return identity
    by_conf, by_context = _who(conf), _who(context)
    if by_conf and by_context and by_conf != by_context:
        raise IdentityConflict("the run config and the run context name different users")
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


def _field(user: Any, name: str) -> Any:
    """A field of the server's user: a key (a dict, the server's user objects) or an attribute."""
    get = getattr(user, "get", None)
    value = get(name) if callable(get) else None
    return value if value is not None else getattr(user, name, None)


def _names(value: Any) -> bool:
    return isinstance(value, list | tuple | set | frozenset) and all(
        isinstance(item, str) for item in value
    )


def server_identity(user: Any, fields: ServerUserFields) -> Identity:
    """The identity LangGraph Server's authenticated `user` carries, read through `fields`."""
    who, tenant = _field(user, fields.user), _field(user, fields.tenant)
    if not (isinstance(who, str) and who):
        raise MissingIdentity(f"the server's authenticated user has no {fields.user!r}")
    if not (isinstance(tenant, str) and tenant):
        raise MissingIdentity(
            f"the server's authenticated user {who!r} has no {fields.tenant!r}; writegate "
            "acts only for a user of a tenant: authenticate as one (LangGraph Studio's "
            "own user has none)"
        )
    roles = (_field(user, fields.roles) if fields.roles else None) or []
    if not _names(roles):
        raise MissingIdentity(f"the server's user field {fields.roles!r} is not a list of names")
    trust = _field(user, fields.trust) if fields.trust else None
    if trust is not None and not isinstance(trust, str):
        raise MissingIdentity(f"the server's user field {fields.trust!r} is not a trust level")
    return Identity(who, tenant, frozenset(roles), trust)


def check_claims(
    identity: Identity, claims: Mapping[str, Any], where: str, also_user: set[str]
) -> None:
    """Refuse what the client's `claims` say beyond the authenticated `identity`."""
    refused = []
    user, tenant = claims.get("user_id"), claims.get("tenant_id")
    if user not in (None, "") and user != identity.user_id and user not in also_user:
        refused.append("another user_id")
    if tenant not in (None, "") and tenant != identity.tenant_id:
        refused.append("another tenant_id")
    roles = claims.get("roles")
    if roles is not None and not (_names(roles) and set(roles) <= identity.roles):
        refused.append("roles the user does not have")
    trust = claims.get("trust")
    if trust is not None and trust != identity.trust:
        refused.append("a trust level the server did not give")
    if refused:
        raise IdentityConflict(
            f"this run is authenticated as {identity.user_id!r} of {identity.tenant_id!r}, "
            f"but its {where} names {' and '.join(refused)}; the server's authenticated "
            "user alone says who acts: leave user_id, tenant_id, roles and trust out of "
            "the run (or repeat what the server says), or authenticate as that user"
        )


def thread_of(config: RunnableConfig) -> str:
    thread = (config.get("configurable") or {}).get("thread_id")
    return str(thread) if thread else "no-thread"
