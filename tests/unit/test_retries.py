"""Retries: which errors are retried, how often, with which key, and what state follows.

On the in-memory store with a fake downstream: fast and exact. The fault rules of
the provider simulator are parsed here too.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from writegate.approval import errors
from writegate.approval.decisions import Confirm
from writegate.approval.execution import Executor, RetryPolicy, outcome_status
from writegate.approval.models import ExecutionStatus, Identity
from writegate.approval.retention import RetentionPolicy
from writegate.approval.service import ApprovalService, Confirmation
from writegate.approval.spec import DownstreamResult
from writegate.checkpoints.memory import MemoryLedgerStore
from tests.unit.fake_tool import AddTool, Counters, Tools
from writegate.tools.faults import FaultScript, parse_rule

ALICE = Identity("alice", "t1")
TRANSIENT = [errors.UpstreamTimeout, errors.TemporarilyUnavailable, errors.RateLimited]
NEVER_RETRIED = [
    errors.ValidationFailed,
    errors.Forbidden,
    errors.Declined,
    errors.IdempotencyConflict,
    errors.ExecutionFailed,
]


class KeyedTool(AddTool):
    """AddTool that remembers the key of every call and can block or crash."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: list[str] = []
        self.release = threading.Event()
        self.block = False
        self.crash: Exception | None = None

    def call_downstream(self, args: dict[str, Any], request_key: str) -> DownstreamResult:
        self.keys.append(request_key)
        if self.block:
            self.release.wait(5)
        if self.crash is not None:
            self.effects.setdefault(request_key, args)
            raise self.crash
        return super().call_downstream(args, request_key)


@pytest.fixture
def world() -> tuple[KeyedTool, MemoryLedgerStore, ApprovalService, list[float]]:
    tool = KeyedTool()
    now = datetime(2026, 9, 1, tzinfo=UTC)
    store = MemoryLedgerStore(clock=lambda: now, conn=Counters())
    return tool, store, ApprovalService(store, Tools(tool)), []


def run(world: Any, script: list[Any], **policy: Any) -> tuple[Executor, str, Any]:
    tool, store, service, sleeps = world
    tool.script = list(script)
    executor = Executor(service, retry=RetryPolicy(base_delay=0.1, **policy), sleep=sleeps.append)
    proposal = service.propose(
        ALICE,
        thread_id="th",
        tool_call_id="c1",
        tool_name="add",
        raw_args={"counter_id": "c1", "amount": 5},
    )
    confirmed = service.decide(ALICE, Confirm(action="confirm", proposal_id=proposal.proposal_id))
    assert isinstance(confirmed, Confirmation)
    try:
        outcome: Any = executor.execute(ALICE, confirmed.token)
    except errors.WritegateError as exc:
        outcome = exc
    with store.transaction() as tx:
        execution = tx.get_execution(request_key=proposal.request_key)
    return executor, proposal.request_key, (outcome, execution)


@pytest.mark.parametrize("error", TRANSIENT)
def test_transient_errors_are_retried_twice_with_backoff_and_the_same_key(world, error):
    tool, _, _, sleeps = world
    _, key, (outcome, _) = run(world, [error(), error()])
    assert outcome.status == "succeeded"
    assert tool.keys == [key, key, key] and sleeps == [0.1, 0.2]


@pytest.mark.parametrize("error", NEVER_RETRIED)
def test_validation_permission_decline_and_conflict_are_never_retried(world, error):
    tool, _, _, sleeps = world
    _, _, (outcome, execution) = run(world, [error()])
    assert isinstance(outcome, error) and len(tool.keys) == 1 and sleeps == []
    assert execution.status is ExecutionStatus.FAILED_TERMINAL


def test_at_most_two_retries_then_failed_retryable(world):
    tool, _, _, _ = world
    _, _, (outcome, execution) = run(world, [errors.RateLimited()] * 5)
    assert isinstance(outcome, errors.RateLimited) and len(tool.keys) == 3
    assert execution.status is ExecutionStatus.FAILED_RETRYABLE


def test_a_timeout_leaves_the_state_unknown_not_failed(world):
    _, _, (outcome, execution) = run(world, [errors.UpstreamTimeout()] * 3)
    assert isinstance(outcome, errors.OutcomeUnknown)
    assert execution.status is ExecutionStatus.UNKNOWN


def test_a_timeout_then_refusals_to_answer_stays_unknown(world):
    # The first attempt may have applied; later 503s do not prove it did not.
    script = [errors.UpstreamTimeout(), errors.TemporarilyUnavailable(), errors.RateLimited()]
    _, _, (outcome, execution) = run(world, script)
    assert isinstance(outcome, errors.OutcomeUnknown)
    assert execution.status is ExecutionStatus.UNKNOWN
    assert execution.error_code == "upstream_timeout"


def test_an_unexpected_exception_is_unknown_and_not_retried(world):
    tool, _, _, _ = world
    tool.crash = ConnectionResetError("peer went away")
    _, _, (outcome, execution) = run(world, [])
    assert isinstance(outcome, errors.OutcomeUnknown) and len(tool.keys) == 1
    assert execution.status is ExecutionStatus.UNKNOWN


def test_a_call_over_its_deadline_is_abandoned_as_unknown(world):
    tool, _, _, _ = world
    tool.block = True
    try:
        _, _, (outcome, execution) = run(world, [], call_timeout=0.05, max_retries=0)
    finally:
        tool.release.set()
    assert isinstance(outcome, errors.OutcomeUnknown)
    assert execution.status is ExecutionStatus.UNKNOWN


def test_backoff_is_exponential_and_capped():
    policy = RetryPolicy(base_delay=1.0, max_delay=3.0)
    assert [policy.delay(n) for n in range(4)] == [1.0, 2.0, 3.0, 3.0]


def test_outcome_status_maps_each_kind_of_answer():
    assert outcome_status(DownstreamResult("ref")) is ExecutionStatus.SUCCEEDED
    assert outcome_status(errors.UpstreamTimeout()) is ExecutionStatus.UNKNOWN
    assert outcome_status(errors.RateLimited()) is ExecutionStatus.FAILED_RETRYABLE
    assert outcome_status(errors.Forbidden()) is ExecutionStatus.FAILED_TERMINAL


def test_fault_rules_parse_and_are_consumed_per_matching_call():
    script = FaultScript()
    script.add("ord_1=503*2,timeout_after", "lookup:ord_1=timeout", "ord_2=429*")
    with pytest.raises(errors.TemporarilyUnavailable):
        script.before_refund("k:ord_1:a")
    with pytest.raises(errors.TemporarilyUnavailable):
        script.before_refund("k:ord_1:a")
    script.before_refund("k:ord_1:a")  # timeout_after: nothing before the apply...
    with pytest.raises(errors.UpstreamTimeout):
        script.after_refund("k:ord_1:a", {})  # ...the answer is lost after it
    script.before_refund("k:ord_1:a")  # rule spent: behaves
    script.after_refund("k:ord_1:a", {})
    with pytest.raises(errors.UpstreamTimeout):
        script.before_lookup("k:ord_1:a")
    for _ in range(5):
        with pytest.raises(errors.RateLimited):
            script.before_refund("k:ord_2:b")
    assert script.call_counts()["refund"]["k:ord_1:a"] == 4


@pytest.mark.parametrize("bad", ["bogus", "ord_1=", "lookup:apply_then_die", "x=503*z"])
def test_malformed_fault_rules_are_refused(bad):
    with pytest.raises(ValueError):
        parse_rule(bad)


def test_retention_days_come_from_the_environment():
    assert RetentionPolicy.from_env({}).days == 90
    assert RetentionPolicy.from_env({"WRITEGATE_RETENTION_DAYS": "7"}).keep == timedelta(days=7)
    with pytest.raises(ValueError):
        RetentionPolicy.from_env({"WRITEGATE_RETENTION_DAYS": "a week"})
    with pytest.raises(ValueError):
        RetentionPolicy(-1)
