"""The executor's one path asks the service little: a confirm is claimed with where it
stands (`confirm_stage`, the one status switch) and the tool it runs, nothing more."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

from tests.fakes.memory_ledger import MemoryLedgerStore
from tests.unit.fake_tool import AddTool, Counters, Tools
from writegate.approval.decisions import Confirm
from writegate.approval.execution import Executor, RetryPolicy
from writegate.approval.models import Identity, Receipt
from writegate.approval.service import ApprovalService, Confirmation, Policy

ALICE = Identity("alice", "t1")


class Asked:
    """The executor's view of the service, counting every member it reads there."""

    def __init__(self, service: ApprovalService) -> None:
        self.service = service
        self.asked: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        self.asked[name] += 1
        return getattr(self.service, name)


def world() -> tuple[ApprovalService, Executor, Asked]:
    store = MemoryLedgerStore(conn=Counters())
    service = ApprovalService(store, Tools(AddTool()), Policy(proposal_ttl=timedelta(minutes=9)))
    executor = Executor(service, retry=RetryPolicy(base_delay=0), sleep=lambda s: None)
    asked = Asked(service)
    executor.service = asked  # type: ignore[assignment]
    return service, executor, asked


def propose(service: ApprovalService, call: str) -> str:
    proposal = service.propose(
        ALICE, thread_id="th", tool_call_id=call, tool_name="add",
        raw_args={"counter_id": "c1", "amount": 5},
    )  # fmt: skip
    return proposal.proposal_id


def test_a_graph_confirm_asks_the_service_twice_at_most() -> None:
    service, executor, asked = world()
    pid = propose(service, "a")
    receipt = executor.confirm(ALICE, Confirm(action="confirm", proposal_id=pid))
    assert isinstance(receipt, Receipt)
    assert sum(asked.asked.values()) <= 2, dict(asked.asked)


def test_a_presented_token_asks_the_service_twice_at_most() -> None:
    service, executor, asked = world()
    pid = propose(service, "b")
    confirmed = service.decide(ALICE, Confirm(action="confirm", proposal_id=pid))
    assert isinstance(confirmed, Confirmation)
    receipt = executor.execute(ALICE, confirmed.token, proposal_id=pid)
    assert isinstance(receipt, Receipt)
    assert sum(asked.asked.values()) <= 2, dict(asked.asked)
