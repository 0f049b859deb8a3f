"""Identity comes from the server's authenticated user, else the host's run config or
run context, never from anywhere else."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from langgraph.config import CONFIG_KEY_RUNTIME
from langgraph.runtime import Runtime
from langgraph_sdk.auth.types import StudioUser

from writegate.approval.models import Identity
from writegate.graph.identity import IdentityConflict, MissingIdentity, identity_of
from writegate.runtime.wiring import ServerUserFields


@dataclass
class Context:
    user_id: str
    tenant_id: str


def config(context: Any = None, **configurable: Any) -> Any:
    if context is not None:
        configurable[CONFIG_KEY_RUNTIME] = Runtime(context=context)
    return {"configurable": configurable}


def test_identity_from_the_run_context_object() -> None:
    identity = identity_of(config(Context("u1", "t1")))
    assert (identity.user_id, identity.tenant_id) == ("u1", "t1")


def test_identity_from_a_mapping_context_with_roles() -> None:
    identity = identity_of(config({"user_id": "u1", "tenant_id": "t1", "roles": ["approver"]}))
    assert identity.roles == frozenset({"approver"})


def test_config_and_context_naming_different_users_is_refused() -> None:
    with pytest.raises(MissingIdentity, match="different users"):
        identity_of(config(Context("u2", "t1"), user_id="u1", tenant_id="t1"))


def test_config_and_context_agreeing_is_fine() -> None:
    assert identity_of(config(Context("u1", "t1"), user_id="u1", tenant_id="t1")).user_id == "u1"


def test_no_identity_anywhere_is_refused() -> None:
    with pytest.raises(MissingIdentity):
        identity_of(config(Context("", "t1")))


# -- under LangGraph Server with an auth handler: the server's user alone -------------


USER_7 = {"identity": "user_7", "tenant_id": "tenant_hz", "roles": ["agent"], "trust": "low"}


def served(user: Any, context: Any = None, **configurable: Any) -> Any:
    """A run config as LangGraph Server builds it: the authenticated user, its id, and
    whatever the client put in configurable (or context, mirrored by the server)."""
    identity = _field_of(user, "identity")
    configurable = {"user_id": identity, **configurable}  # the server fills user_id
    configurable |= {"langgraph_auth_user": user, "langgraph_auth_user_id": identity}
    return config(context, **configurable)


def _field_of(user: Any, name: str) -> Any:
    return user[name] if isinstance(user, dict) else getattr(user, name)


def test_the_server_user_says_who_acts_by_default_fields() -> None:
    identity = identity_of(served(USER_7))
    assert identity == Identity("user_7", "tenant_hz", frozenset({"agent"}), "low")


def test_the_fields_are_settable() -> None:
    user = {"identity": "sub|9", "email": "ann@example.com", "org": "acme", "groups": ["approver"]}
    fields = ServerUserFields(user="email", tenant="org", roles="groups", trust=None)
    identity = identity_of(served(user), fields)
    assert identity == Identity("ann@example.com", "acme", frozenset({"approver"}), None)


def test_a_server_user_object_with_attributes_is_read_too() -> None:
    @dataclass
    class Member:
        identity: str
        tenant_id: str

    assert identity_of(served(Member("user_7", "tenant_hz"))).tenant_id == "tenant_hz"


def test_the_studio_user_has_no_tenant_and_is_refused() -> None:
    with pytest.raises(MissingIdentity, match="'tenant_id'") as refused:
        identity_of(served(StudioUser("langgraph-studio-user")))
    body = refused.value.to_dict()
    assert body.pop("request_id").startswith("req_")  # the same shape as every refusal
    assert body == {
        "code": "identity_missing",
        "message": refused.value.message,
        "retryable": False,
    }


@pytest.mark.parametrize(
    "claim",
    [
        {"user_id": "user_42"},
        {"tenant_id": "tenant_other"},
        {"roles": ["approver"]},
        {"roles": ["agent", "approver"]},
        {"roles": "agent"},
        {"trust": "high"},
    ],
)
def test_a_claim_beyond_the_server_user_is_refused_in_configurable_or_context(
    claim: dict[str, Any],
) -> None:
    with pytest.raises(IdentityConflict, match="'user_7'") as by_configurable:
        identity_of(served(USER_7, **claim))
    with pytest.raises(IdentityConflict) as by_context:
        identity_of(served(USER_7, context=claim))
    assert by_configurable.value.to_dict()["code"] == "identity_conflict"
    assert "context" in by_context.value.message


def test_repeating_what_the_server_user_carries_is_accepted() -> None:
    same = {"user_id": "user_7", "tenant_id": "tenant_hz", "roles": ["agent"], "trust": "low"}
    assert identity_of(served(USER_7, context=same, **same)).user_id == "user_7"
    assert identity_of(served(USER_7, roles=[])).roles == frozenset({"agent"})


def test_no_trust_field_means_no_trust_from_anyone() -> None:
    fields = ServerUserFields(trust=None)
    assert identity_of(served(USER_7), fields).trust is None
    with pytest.raises(IdentityConflict):
        identity_of(served(USER_7, trust="low"), fields)


def test_the_servers_own_user_id_fill_is_not_a_claim() -> None:
    user = {"identity": "sub|9", "email": "ann@example.com", "tenant_id": "acme"}
    fields = ServerUserFields(user="email")
    assert identity_of(served(user), fields).user_id == "ann@example.com"


def test_roles_that_are_not_names_are_refused() -> None:
    with pytest.raises(MissingIdentity, match="'roles'"):
        identity_of(served({**USER_7, "roles": "approver"}))


def test_without_a_server_user_the_hosts_run_config_is_used() -> None:
    unauthenticated = config(
        None, user_id="u1", tenant_id="t1", langgraph_auth_user=None, langgraph_auth_user_id=""
    )
    assert identity_of(unauthenticated) == Identity("u1", "t1")
