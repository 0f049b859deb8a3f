"""Identity comes from the host's run config or run context, never from anywhere else."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from langgraph.config import CONFIG_KEY_RUNTIME
from langgraph.runtime import Runtime

from writegate.graph.identity import MissingIdentity, identity_of


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
