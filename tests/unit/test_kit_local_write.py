"""A `write_tool` function taking `conn` runs inside writegate's transaction."""

from __future__ import annotations

from typing import Any

import pytest

from writegate.approval.errors import StateChanged
from writegate.approval.models import Identity
from writegate.approval.spec import ToolContext
from writegate.tools.kit import write_tool
from writegate.tools.kit_spec import Checked

ME = Identity("alice", "t1")


class Transaction:
    """Stands in for the ledger transaction's connection: a row and what was written."""

    def __init__(self, version: int) -> None:
        self.version = version
        self.written: list[tuple[str, int]] = []


def _check(args: dict[str, Any], identity: Identity, *, conn: Transaction) -> Checked:
    return Checked(conn.version, {"was": "draft"})


@write_tool(side_effect="reversible", validate=_check)
def publish(
    doc: str, *, request_key: str, conn: Transaction, expected_version: int
) -> dict[str, Any]:
    """Publish a document."""
    conn.written.append((doc, expected_version))
    return {"doc": doc}


def test_a_local_write_runs_in_apply_with_the_connection_and_the_confirmed_version() -> None:
    spec, conn = publish.spec, Transaction(version=4)
    seen = spec.validate(ToolContext(ME, conn, "th"), {"doc": "d1"})
    assert (seen.state_version, seen.facts) == (4, {"was": "draft"})
    assert not spec.has_downstream  # nothing runs outside the transaction
    done = spec.apply(
        ToolContext(ME, conn, "th"), {"doc": "d1"}, expected_version=4, request_key="k"
    )
    assert done == {"doc": "d1"} and conn.written == [("d1", 4)]


def test_a_local_write_does_not_run_when_the_version_moved() -> None:
    conn = Transaction(version=5)
    with pytest.raises(StateChanged):
        publish.spec.apply(
            ToolContext(ME, conn, "th"), {"doc": "d1"}, expected_version=4, request_key="k"
        )
    assert conn.written == []


def test_expected_version_is_only_for_a_local_write() -> None:
    with pytest.raises(TypeError, match="local write"):

        @write_tool(side_effect="external")
        def send(to: str, *, request_key: str, expected_version: int) -> None:
            """Send."""
