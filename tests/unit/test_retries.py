"""Retries: which errors are retried, how often, with which key, and what state follows.

On the in-memory store with a fake downstream: fast and exact. The fault rules of
the provider simulator are parsed here too.
"""

from __future__ import annotations

import contextvars
import multiprocessing
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.unit.fake_tool import AddTool, Counters, Tools
from writegate.approval import errors
from writegate.approval.decisions import Confirm
from writegate.approval.downstream import WORKERS, Workers, call_with_retries
from writegate.approval.execution import Executor, RetryPolicy, outcome_status
from writegate.approval.models import ExecutionStatus, Identity
from writegate.approval.retention import RetentionPolicy
from writegate.approval.service import ApprovalService, Confirmation
from writegate.approval.spec import DownstreamResult
from writegate.checkpoints.memory import MemoryLedgerStore
from writegate.tools.demo.faults import FaultScript, parse_rule

ALICE = Identity("alice", "t1")
LABEL: contextvars.ContextVar[str] = contextvars.ContextVar("label")
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


@pytest.mark.parametrize(
    "error",
    [
        errors.UpstreamTimeout,
        errors.TemporarilyUnavailable,
        errors.RateLimited,
        errors.OutcomeUnknown,
        errors.InProgress,
    ],
)
def test_an_unsettled_write_tells_the_model_not_to_propose_it_again(error):
    from writegate.graph.messages import error_content

    of_a_write = error_content(error(execution_id="exec_1", request_key="k1"))
    assert "Do not propose it again" in of_a_write["advice"]
    # Without an execution there is nothing being finished: no such advice.
    assert "Do not propose it again" not in error_content(error()).get("advice", "")


def _on_worker(workers: Workers, job: Any) -> threading.Event:
    done = threading.Event()
    workers.submit(contextvars.copy_context(), job, done)
    return done


def test_calls_made_one_after_another_share_one_worker_thread():
    workers, ran_on = Workers(), []
    for _ in range(3):
        assert _on_worker(workers, lambda: ran_on.append(threading.get_ident())).wait(5)
    assert len(set(ran_on)) == 1
    assert workers.idle() == 1


def test_a_hung_call_does_not_hold_up_the_next_one():
    workers, started, release, ran_on = Workers(), threading.Event(), threading.Event(), []

    def hang() -> None:
        ran_on.append(threading.get_ident())
        started.set()
        release.wait(10)

    hung = _on_worker(workers, hang)
    try:
        assert started.wait(5)
        assert _on_worker(workers, lambda: ran_on.append(threading.get_ident())).wait(5)
        assert not hung.is_set()
        assert len(set(ran_on)) == 2
    finally:
        release.set()
    assert hung.wait(5)
    assert workers.idle() == 2


def test_an_idle_worker_ends_after_its_idle_timeout():
    workers, threads = Workers(idle_timeout=0.01), []
    assert _on_worker(workers, lambda: threads.append(threading.current_thread())).wait(5)
    threads[0].join(5)
    assert not threads[0].is_alive()
    assert workers.idle() == 0


def test_a_worker_sees_the_callers_context_variables():
    seen: list[str] = []
    token = LABEL.set("the caller's")
    try:
        assert _on_worker(Workers(), lambda: seen.append(LABEL.get())).wait(5)
    finally:
        LABEL.reset(token)
    assert seen == ["the caller's"]


def _call_in_child(out: Any) -> None:
    args, policy = {"counter_id": "c1", "amount": 1}, RetryPolicy(max_retries=0, call_timeout=5)
    out.put(type(call_with_retries(AddTool(), args, "k-child", policy)).__name__)


def test_a_forked_child_does_not_wait_on_its_parents_workers():
    # Leave a worker idle in this process; a child forked now has no such thread.
    assert _on_worker(WORKERS, lambda: None).wait(5)
    assert WORKERS.idle() >= 1
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_call_in_child, args=(out,))
    child.start()
    try:
        assert out.get(timeout=30) == "DownstreamResult"
    finally:
        child.join(30)
    assert child.exitcode == 0
