"""One executor shared by threads (a threaded HTTP server, the graph's workers): a
second request for an execution that is still running must not call the downstream
again; it is told `in_progress`."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from writegate import Identity, Writegate, write_tool
from writegate.approval.decisions import Confirm
from writegate.approval.errors import InProgress
from writegate.approval.execution import AwaitingSecond
from writegate.approval.models import Receipt

ME = Identity("user_race", "tenant_race")
ENTERED, RELEASE = threading.Event(), threading.Event()
SENT: list[str] = []


@write_tool(side_effect="external")
def slow_send(note: str, *, request_key: str) -> dict[str, Any]:
    """Send a note downstream; it keeps no record of keys.

    Args:
        note: What to send.
    """
    SENT.append(request_key)
    ENTERED.set()
    assert RELEASE.wait(30), "the test never released the downstream"
    return {"status": "sent", "note": note}


@pytest.fixture
def wg(create_database: Callable[[], str]) -> Iterator[Writegate]:
    with Writegate.open(create_database(), tools=[slow_send]) as gate:
        yield gate


def test_a_duplicate_request_while_the_first_is_in_flight_sends_nothing(wg: Writegate) -> None:
    service, executor = wg.runtime.service, wg.runtime.executor
    proposal = service.propose(
        ME, thread_id="th_race", tool_call_id=f"call_{secrets.token_hex(4)}",
        tool_name="slow_send", raw_args={"note": "hello"},
    )  # fmt: skip
    confirm = Confirm(action="confirm", proposal_id=proposal.proposal_id)
    first: list[Receipt | AwaitingSecond] = []
    runner = threading.Thread(target=lambda: first.append(executor.confirm(ME, confirm)))
    runner.start()
    assert ENTERED.wait(30)
    try:
        with pytest.raises(InProgress):
            executor.confirm(ME, confirm)
    finally:
        RELEASE.set()
        runner.join()
    assert [receipt.status for receipt in first if isinstance(receipt, Receipt)] == ["succeeded"]
    assert len(SENT) == 1
