"""The protocol's scenarios on the in-memory store (fast; PostgreSQL has its own suite)."""

from __future__ import annotations

from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest

from tests.fakes.memory_ledger import MemoryLedgerStore
from tests.unit.fake_tool import AddTool, Counters, Tools
from writegate.approval import errors
from writegate.approval.decisions import Cancel, Confirm, Decline, Edit, parse_decision
from writegate.approval.execution import Executor, RetryPolicy
from writegate.approval.models import ExecutionStatus, Identity, ProposalStatus
from writegate.approval.service import ApprovalService, Confirmation, Ended, Policy
from writegate.approval.store import CallLookup

ALICE = Identity("alice", "t1")
T0 = datetime(2026, 9, 1, 6, 20, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def world():
    clock = Clock()
    db = Counters()
    tool = AddTool()
    store = MemoryLedgerStore(clock=clock, conn=db)
    service = ApprovalService(
        store,
        Tools(tool),
        Policy(proposal_ttl=timedelta(minutes=10), token_ttl=timedelta(minutes=5)),
    )
    executor = Executor(service, retry=RetryPolicy(base_delay=0), sleep=lambda s: None)
    return clock, db, tool, store, service, executor


def propose(service, call="call_1", amount=5, who=ALICE, thread="th1"):
    return service.propose(
        who,
        thread_id=thread,
        tool_call_id=call,
        tool_name="add",
        raw_args={"counter_id": "c1", "amount": amount},
    )


def confirm(service, proposal, who=ALICE) -> Confirmation:
    result = service.decide(who, Confirm(action="confirm", proposal_id=proposal.proposal_id))
    assert isinstance(result, Confirmation)
    return result


def test_reproposing_the_same_call_returns_the_first_proposal(world):
    _, _, _, _, service, _ = world
    first = propose(service)
    assert propose(service).proposal_id == first.proposal_id


def test_same_tool_call_id_with_other_args_is_a_conflict(world):
    service = world[4]
    propose(service)
    with pytest.raises(errors.IdempotencyConflict):
        propose(service, amount=6)


def test_retry_with_new_tool_call_id_reuses_the_open_proposal(world):
    service = world[4]
    assert propose(service, call="a").proposal_id == propose(service, call="b").proposal_id


def test_confirm_then_execute_writes_once_and_second_use_returns_first_receipt(world):
    _, db, tool, _, service, executor = world
    p = propose(service)
    c = confirm(service, p)
    receipt = executor.execute(ALICE, c.token, proposal_id=p.proposal_id)
    assert receipt.status == "succeeded" and db.values["c1"] == 5
    with pytest.raises(errors.AlreadyConsumed) as again:
        executor.execute(ALICE, c.token, proposal_id=p.proposal_id)
    assert again.value.details["receipt"]["execution_id"] == receipt.execution_id
    assert db.values["c1"] == 5 and len(tool.effects) == 1 and tool.calls == 1
    assert db.confirmed == 1  # the local record of the downstream success, once


def test_only_the_subject_in_its_tenant_may_decide(world):
    service = world[4]
    p = propose(service)
    for stranger in (Identity("bob", "t1"), Identity("alice", "t2")):
        with pytest.raises(errors.NotFound):
            service.decide(stranger, Confirm(action="confirm", proposal_id=p.proposal_id))
    assert service.get_proposal(ALICE, p.proposal_id).status is ProposalStatus.AWAITING


def _shown() -> bool:
    return True


@pytest.mark.parametrize(
    "value",
    ["ok", "好的", {"action": "approve"}, None, {"action": "confirm", "proposal_id": "prop_other"}],
)
def test_free_text_or_other_proposal_is_not_a_decision(value):
    with pytest.raises(errors.InvalidDecision):
        parse_decision(value, asked_proposal_id="prop_1", presented=_shown)


def test_hitl_shape_maps_to_structured_decisions():
    ok = parse_decision(
        {"decisions": [{"type": "approve"}]}, asked_proposal_id="p", presented=_shown
    )
    reject = {"decisions": [{"type": "reject", "message": "no"}]}
    no = parse_decision(reject, asked_proposal_id="p", presented=_shown)
    assert isinstance(ok, Confirm) and isinstance(no, Decline)


@pytest.mark.parametrize(
    ("decision", "status"),
    [
        (Decline(action="decline", proposal_id="?"), ProposalStatus.DECLINED),
        (Cancel(action="cancel", proposal_id="?"), ProposalStatus.CANCELLED),
    ],
)
def test_decline_and_cancel_are_distinct_final_states(world, decision, status):
    service = world[4]
    p = propose(service)
    ended = service.decide(ALICE, decision.model_copy(update={"proposal_id": p.proposal_id}))
    assert isinstance(ended, Ended) and ended.proposal.status is status
    with pytest.raises(errors.ProposalNotPending):
        confirm(service, p)


def test_proposal_is_expired_at_exactly_its_expiry(world):
    clock, _, _, _, service, _ = world
    p = propose(service)
    clock.now = p.expires_at
    with pytest.raises(errors.ProposalExpired):
        confirm(service, p)
    assert service.get_proposal(ALICE, p.proposal_id).status is ProposalStatus.EXPIRED


def test_token_is_refused_at_exactly_its_expiry_and_nothing_runs(world):
    clock, db, tool, _, service, executor = world
    p = propose(service)
    c = confirm(service, p)
    clock.now = c.expires_at
    with pytest.raises(errors.TokenExpired):
        executor.execute(ALICE, c.token, proposal_id=p.proposal_id)
    assert db.values["c1"] == 0 and tool.calls == 0


def test_edit_supersedes_and_the_old_token_is_refused(world):
    _, db, _, _, service, executor = world
    p = propose(service)
    c = confirm(service, p)
    edited = service.decide(
        ALICE,
        Edit(action="edit", proposal_id=p.proposal_id, args={"counter_id": "c1", "amount": 7}),
    )
    assert edited.args["amount"] == 7 and edited.proposal_id != p.proposal_id
    with pytest.raises(errors.ProposalSuperseded):
        executor.execute(ALICE, c.token, proposal_id=p.proposal_id)
    c2 = confirm(service, edited)
    assert executor.execute(ALICE, c2.token).status == "succeeded" and db.values["c1"] == 7


def test_state_change_between_confirm_and_execute_refuses_without_writing(world):
    _, db, tool, _, service, executor = world
    p = propose(service)
    c = confirm(service, p)
    db.versions["c1"] += 1  # another channel changed the counter
    with pytest.raises(errors.StateChanged):
        executor.execute(ALICE, c.token)
    assert db.values["c1"] == 0 and tool.calls == 0


def test_policy_change_refuses_an_old_token(world):
    _, _, _, store, service, _ = world
    p = propose(service)
    c = confirm(service, p)
    newer = ApprovalService(store, service.tools, Policy(version="v2"))
    with pytest.raises(errors.PolicyChanged):
        Executor(newer).execute(ALICE, c.token)


def test_other_audience_is_refused(world):
    _, _, _, store, service, _ = world
    c = confirm(service, propose(service))
    other = ApprovalService(store, service.tools, Policy(audience="billing"))
    with pytest.raises(errors.AudienceMismatch):
        Executor(other).execute(ALICE, c.token)


def test_timeout_after_apply_is_unknown_not_failed_and_not_rerun(world):
    _, _, tool, store, service, executor = world
    tool.script = [errors.UpstreamTimeout()] * 3
    c = confirm(service, propose(service))
    with pytest.raises(errors.OutcomeUnknown):
        executor.execute(ALICE, c.token)
    assert tool.calls == 1 and len(tool.effects) == 1  # it may have applied: not sent again
    with store.transaction() as tx:
        assert tx.get_execution(request_key=c.proposal.request_key).status is (
            ExecutionStatus.UNKNOWN
        )
    with pytest.raises(errors.OutcomeUnknown):
        executor.execute(ALICE, c.token)
    assert tool.calls == 1
    with pytest.raises(errors.OutcomeUnknown):  # nor may the model propose it again
        propose(service, call="call_retry")


def test_non_retryable_downstream_error_is_not_retried_and_compensates(world):
    _, db, tool, _, service, executor = world
    tool.script = [errors.ExecutionFailed("card closed")]
    c = confirm(service, propose(service))
    with pytest.raises(errors.ExecutionFailed):
        executor.execute(ALICE, c.token)
    assert tool.calls == 1 and db.values["c1"] == 0


def test_unavailable_is_retried_then_resumed_with_the_same_key(world):
    _, db, tool, _, service, executor = world
    tool.script = [errors.TemporarilyUnavailable()] * 3
    c = confirm(service, propose(service))
    with pytest.raises(errors.TemporarilyUnavailable):
        executor.execute(ALICE, c.token)
    assert tool.calls == 3 and not tool.effects
    receipt = executor.execute(ALICE, c.token)  # same token: resume, same request key
    assert receipt.status == "succeeded" and list(tool.effects) == [receipt.request_key]
    assert db.values["c1"] == 5


def test_replay_by_another_user_or_tenant_is_refused(world):
    _, db, _, _, service, executor = world
    c = confirm(service, propose(service))
    with pytest.raises(errors.SubjectMismatch):
        executor.execute(Identity("bob", "t1"), c.token)
    with pytest.raises(errors.TenantMismatch):
        executor.execute(Identity("alice", "t2"), c.token)
    with pytest.raises(errors.TokenUnknown):
        executor.execute(ALICE, "wgt_forged")
    assert db.values["c1"] == 0


def test_every_call_is_audited_with_equal_digests_on_success(world):
    _, _, _, store, service, executor = world
    p = propose(service)
    c = confirm(service, p)
    executor.execute(ALICE, c.token)
    with pytest.raises(errors.ValidationFailed):
        service.propose(
            ALICE,
            thread_id="th1",
            tool_call_id="bad",
            tool_name="add",
            raw_args={"counter_id": "c1", "amount": 1.5},
        )
    rows = list(store.audit_rows("t1"))
    assert [r["event"] for r in rows] == ["propose", "decide", "execute", "propose"]
    done = rows[2]
    assert done["requested_digest"] == done["approved_digest"] == done["executed_digest"]
    assert rows[3]["status"] == "rejected" and rows[3]["error_code"] == "validation_failed"


def test_an_escalated_or_retryable_write_cannot_be_proposed_again(world):
    _, _, tool, store, service, executor = world
    tool.script = [errors.TemporarilyUnavailable()] * 3
    c = confirm(service, propose(service))
    with pytest.raises(errors.TemporarilyUnavailable):
        executor.execute(ALICE, c.token)
    with pytest.raises(errors.InProgress):  # failed_retryable: it will be retried by key
        propose(service, call="call_again")
    with store.transaction() as tx:
        execution = tx.get_execution(request_key=c.proposal.request_key)
        tx.transition_execution(
            execution.execution_id, (ExecutionStatus.FAILED_RETRYABLE,), ExecutionStatus.ESCALATED
        )
    with pytest.raises(errors.OutcomeUnknown):  # a person decides; no second payment
        propose(service, call="call_third")
    assert tool.effects == {}


class _LookupMisses(MemoryLedgerStore):
    """A store whose first read of a call saw no proposal for it: a twin inserted one
    between that read and the insert. The next read sees what is there."""

    @contextmanager
    def statements(self):  # type: ignore[no-untyped-def]
        with super().statements() as tx:
            reads = tx.look_up_call

            def first_misses(*args, **where):  # type: ignore[no-untyped-def]
                tx.look_up_call = reads  # type: ignore[method-assign]
                return CallLookup(None)

            tx.look_up_call = first_misses  # type: ignore[method-assign]
            yield tx


def test_a_twin_inserted_after_the_lookup_by_another_user_is_not_handed_over():
    bob, db = Identity("bob", "t1"), Counters()
    store = _LookupMisses(clock=Clock(), conn=db)
    service = ApprovalService(store, Tools(AddTool()), Policy())
    db.owners["c1"] = "bob"  # so that both may propose the same request in one thread
    bobs = propose(service, who=bob)
    db.owners["c1"] = "alice"
    with pytest.raises(errors.NotFound) as refused:
        propose(service, who=ALICE)
    assert bobs.proposal_id not in str(refused.value.to_dict())  # naming nothing of bob's


def test_a_twin_inserted_after_the_lookup_is_returned_to_its_owner():
    store = _LookupMisses(clock=Clock(), conn=Counters())
    service = ApprovalService(store, Tools(AddTool()), Policy())
    first = propose(service)
    assert propose(service).proposal_id == first.proposal_id
