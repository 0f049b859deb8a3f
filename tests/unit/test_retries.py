"""Retries: which errors are retried, how often, with which key, and what state follows.

On the in-memory store with a fake downstream: fast and exact. The fault rules of
the provider simulator are parsed here too.
"""

from __future__ import annotations

import contextvars
import multiprocessing
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.fakes.memory_ledger import MemoryLedgerStore
from tests.unit.fake_tool import AddTool, Counters, Tools
from writegate.approval import errors
from writegate.approval.decisions import Confirm
from writegate.approval.downstream import WORKERS, Workers, call_with_retries
from writegate.approval.execution import Executor, RetryPolicy, outcome_status
from writegate.approval.models import ExecutionStatus, Identity
from writegate.approval.retention import RetentionPolicy
from writegate.approval.service import ApprovalService, Confirmation
from writegate.approval.spec import DownstreamResult
from writegate.demo.faults import FaultScript, parse_rule

ALICE = Identity("alice", "t1")
LABEL: contextvars.ContextVar[str] = contextvars.ContextVar("label")
NOT_APPLIED = [errors.TemporarilyUnavailable, errors.RateLimited]
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
        self.dedupes_by_key = False  # its downstream drops a repeated key

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


@pytest.mark.parametrize("error", NOT_APPLIED)
def test_explicit_not_applied_answers_are_retried_twice_with_backoff_and_the_same_key(world, error):
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


def test_a_client_timeout_may_have_applied_so_it_is_unknown_and_never_sent_again(world):
    tool, _, _, sleeps = world
    _, key, (outcome, execution) = run(world, [errors.UpstreamTimeout()] * 3)
    assert isinstance(outcome, errors.OutcomeUnknown)
    assert execution.status is ExecutionStatus.UNKNOWN
    assert tool.keys == [key] and sleeps == []


def test_a_tool_that_dedupes_by_key_is_sent_again_after_a_timeout_with_the_same_key(world):
    tool, _, _, sleeps = world
    tool.dedupes_by_key = True
    _, key, (outcome, _) = run(world, [errors.UpstreamTimeout()])
    assert outcome.status == "succeeded"
    assert tool.keys == [key, key] and len(tool.effects) == 1 and sleeps == [0.1]


def test_a_deduplicating_tool_that_keeps_timing_out_ends_unknown_after_two_retries(world):
    tool, _, _, _ = world
    tool.dedupes_by_key = True
    _, key, (outcome, execution) = run(world, [errors.UpstreamTimeout()] * 3)
    assert isinstance(outcome, errors.OutcomeUnknown) and tool.keys == [key] * 3
    assert execution.status is ExecutionStatus.UNKNOWN


def test_a_timeout_then_refusals_to_answer_stays_unknown(world):
    # The first attempt may have applied; later 503s do not prove it did not.
    tool, _, _, _ = world
    tool.dedupes_by_key = True
    script = [errors.UpstreamTimeout(), errors.TemporarilyUnavailable(), errors.RateLimited()]
    _, _, (outcome, execution) = run(world, script)
    assert isinstance(outcome, errors.OutcomeUnknown)
    assert execution.status is ExecutionStatus.UNKNOWN
    assert execution.error_code == "upstream_timeout"


@pytest.mark.parametrize("dedupes", [False, True])
def test_an_unexpected_exception_is_unknown_and_resent_only_to_a_deduplicating_tool(world, dedupes):
    tool, _, _, _ = world
    tool.crash = ConnectionResetError("peer went away")
    tool.dedupes_by_key = dedupes
    _, key, (outcome, execution) = run(world, [])
    assert isinstance(outcome, errors.OutcomeUnknown)
    assert tool.keys == [key] * (3 if dedupes else 1)
    assert execution.status is ExecutionStatus.UNKNOWN


SHORT = {"call_timeout": 0.05, "lease": timedelta(seconds=1)}


def _status(store: MemoryLedgerStore, key: str) -> ExecutionStatus:
    with store.transaction() as tx:
        execution = tx.get_execution(request_key=key)
    assert execution is not None
    return execution.status


def _audited(store: MemoryLedgerStore) -> list[tuple[str, str | None]]:
    return [(r.status, r.error_code) for r in store.state.audit if r.event == "execute"]


def test_a_call_over_its_deadline_is_never_sent_again_and_its_late_answer_settles_it(world):
    tool, store, _, _ = world
    tool.block, tool.dedupes_by_key = True, True  # even a deduplicating tool: still running
    try:
        _, key, (outcome, execution) = run(world, [], **SHORT)
        assert isinstance(outcome, errors.OutcomeUnknown)
        assert execution.status is ExecutionStatus.UNKNOWN
        assert execution.error_code == "deadline_exceeded"
        assert tool.keys == [key]
    finally:
        tool.release.set()
    wait_for(lambda: _status(store, key) is ExecutionStatus.SUCCEEDED, "the late answer")
    assert tool.keys == [key] and len(tool.effects) == 1
    assert _audited(store) == [("unknown", "deadline_exceeded"), ("succeeded", None)]


def test_a_call_running_past_the_overrun_limit_goes_to_a_person_then_its_answer_counts(world):
    tool, store, _, _ = world
    tool.block = True
    limit = {"lease": timedelta(seconds=0.3), "overrun_limit": timedelta(seconds=0.2)}
    try:
        _, key, (outcome, _) = run(world, [], **{**SHORT, **limit})
        assert isinstance(outcome, errors.OutcomeUnknown)
        wait_for(lambda: _status(store, key) is ExecutionStatus.ESCALATED, "the escalation")
        with store.transaction() as tx:
            escalated = tx.get_execution(request_key=key)
        assert escalated is not None and escalated.error_code == "deadline_exceeded"
        why = store.state.escalations[escalated.execution_id]
        assert why["reason"] == "still_running_past_limit"
    finally:
        tool.release.set()
    wait_for(lambda: _status(store, key) is ExecutionStatus.SUCCEEDED, "the late answer")
    assert tool.keys == [key]


@pytest.mark.parametrize(
    "settings",
    [
        {"call_timeout": 10.0, "lease": timedelta(seconds=10)},  # the lease must outlast it
        {"call_timeout": 0.0},
        {"call_timeout": 5.0, "overrun_limit": timedelta(seconds=5)},
        {"max_retries": -1},
    ],
)
def test_a_retry_policy_that_cannot_hold_its_calls_is_refused(settings):
    with pytest.raises(ValueError):
        RetryPolicy(**settings)


def wait_for(condition: Any, what: str, deadline_s: float = 10.0) -> None:
    """Poll until `condition()` holds; fail after the deadline (never a blind sleep)."""
    end = time.monotonic() + deadline_s
    done = threading.Event()
    while not condition():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        done.wait(0.01)


def test_backoff_is_exponential_and_capped():
    policy = RetryPolicy(base_delay=1.0, max_delay=3.0)
    assert [policy.delay(n) for n in range(4)] == [1.0, 2.0, 3.0, 3.0]


def test_outcome_status_maps_each_kind_of_answer():
    assert outcome_status(DownstreamResult("ref")) is ExecutionStatus.SUCCEEDED
    assert outcome_status(errors.UpstreamTimeout()) is ExecutionStatus.UNKNOWN
    assert outcome_status(errors.DeadlineExceeded()) is ExecutionStatus.UNKNOWN
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
        errors.DeadlineExceeded,
        errors.TemporarilyUnavailable,
        errors.RateLimited,
        errors.OutcomeUnknown,
        errors.InProgress,
    ],
)
def test_an_unsettled_write_tells_the_model_not_to_propose_it_again(error):
    from writegate.approval.wire import error_content

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
    answer = call_with_retries(AddTool(), args, "k-child", policy, hold=lambda: True)
    out.put(type(answer).__name__)


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


def test_the_deadline_settings_and_downstream_answers_come_from_writegate():
    import writegate

    public = {"RetryPolicy", "RateLimited", "TemporarilyUnavailable", "UpstreamTimeout"}
    assert public <= set(writegate.__all__)
    assert writegate.RetryPolicy is RetryPolicy
    assert writegate.RateLimited is errors.RateLimited
    assert writegate.TemporarilyUnavailable is errors.TemporarilyUnavailable
    assert writegate.UpstreamTimeout is errors.UpstreamTimeout
