"""Decide an approval over HTTP: one click, at most one resume, the same answer twice.

The caller's identity comes from its key; a proposal that is not theirs is a 404.
The click's idempotency key is claimed first, so a retried click gets the answer the
first one got. Then the thread's advisory lock serializes the resume across requests
and replicas: whoever holds it resumes the graph if the proposal's question is still
open; whoever comes second finds the question gone and answers from the ledger, with
the same receipt. Clicks that find the lock busy wait for it shared, so that they
answer together once the resume is done. Every answer, first or replayed, is read
from the ledger; the resuming click's is read and stored in the transaction that lets
the thread go.

A proposal the ledger holds open whose thread asks no question for it any more (a run
cut by a failover ended the turn) cannot be resumed: under the exclusive lock it is
cancelled and the thread told, and the click answers `not_resumable` with the
cancelled approval (docs/failover.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from langgraph.types import Command
from psycopg import Connection
from psycopg.rows import DictRow

from writegate.approval.canonical import CanonicalizationError, digest
from writegate.approval.conversation import awaiting_second
from writegate.approval.decisions import Cancel
from writegate.approval.errors import (
    AlreadyConsumed,
    IdempotencyConflict,
    InProgress,
    NotResumable,
    ProposalExpired,
    ProposalNotPending,
    ProposalSuperseded,
    ValidationFailed,
    WritegateError,
    database_unavailable,
    error_for_code,
)
from writegate.approval.models import DECIDABLE, Identity, Proposal, ProposalStatus
from writegate.approval.outcomes import execution_outcome, proposal_error
from writegate.approval.service import ApprovalService
from writegate.approval.store import LedgerReads
from writegate.runtime.wiring import Runtime
from writegate.surfaces.store.http_store import HttpStore, Statement, ThreadLock
from writegate.surfaces.web.amounts import minor_units
from writegate.surfaces.web.errors import Refused, error_body, status_for
from writegate.surfaces.web.inputs import EditIn
from writegate.surfaces.web.runner import Questions, Runner, questions_in, stalled_in
from writegate.surfaces.web.schemas import ApprovalView, DecisionResult, MessageView
from writegate.surfaces.web.views import approval_view, proposal_row, receipt_view

Answer = tuple[int, dict[str, Any]]  # an HTTP status and body
Keep = Callable[[int, dict[str, Any]], tuple[Statement, ...]]  # what to store with it
_SAME_END = {(ProposalStatus.DECLINED, "decline"), (ProposalStatus.CANCELLED, "cancel")}
LOST_QUESTION = (
    "this approval's question was lost when the request confirming it was cut short "
    "(a database failover); it was cancelled, nothing ran, and the conversation was "
    "told: ask the assistant again"
)


class _Orphaned(Exception):
    """An open proposal whose thread asks no question for it: repaired under the
    exclusive lock only."""


@dataclass(frozen=True)
class _Ran:
    """A resume under the thread's lock: what its runs said, the questions they left
    open, and whether there was nothing to resume (the click replays an answer)."""

    thread_id: str
    messages: list[MessageView]
    questions: Questions
    replayed: bool


class Decisions:
    def __init__(self, runtime: Runtime, runner: Runner, store: HttpStore, lock_wait_s: float):
        self.rt = runtime
        self.runner = runner
        self.store = store
        self.lock_wait_s = lock_wait_s

    def decide(
        self, identity: Identity, proposal_id: str, decision: Any, key: str, rid: str
    ) -> tuple[int, dict[str, Any]]:
        """The HTTP status and body for one click. The proposal's owner is checked and
        the click's key claimed in one transaction."""
        with self.store.transaction() as conn:
            found = self.rt.store.on(conn).get_proposal(proposal_id, for_update=False)
            proposal = ApprovalService.mine(identity, found, proposal_id)  # 404 if not theirs
            value, edited, request_digest = self._value(proposal, decision)
            click = self.store.claim_click(conn, identity, key, proposal_id, request_digest)
        if click is not None:
            if (click.proposal_id, click.request_digest) != (proposal_id, request_digest):
                raise IdempotencyConflict(
                    "this Idempotency-Key was used for a different decision",
                    proposal_id=proposal_id,
                )
            if click.status_code is not None and click.response is not None:
                return click.status_code, _replayed(click.status_code, click.response, rid)

        def keep(status: int, body: dict[str, Any]) -> tuple[Statement, ...]:
            """A final answer is stored, with the thread's release; a retryable one not."""
            if body.get("retryable", False) or status >= 500:
                return ()
            return (self.store.finish_click_statement(identity, key, status, body),)

        return self._decide_locked(identity, proposal.thread_id, value, edited, rid, keep)

    def _value(self, proposal: Proposal, decision: Any) -> tuple[dict[str, Any], str | None, str]:
        """The resume value of a decision, the digest of an edit's arguments, and the
        click's request digest."""
        if isinstance(decision, EditIn):  # "25.00" typed on the page: exact minor units
            decision = decision.model_copy(
                update={"args": minor_units(decision.args, proposal.args)}
            )
        value = {**decision.model_dump(exclude_none=True), "proposal_id": proposal.proposal_id}
        edited: str | None = None
        try:
            request_digest = digest(value)
            if isinstance(decision, EditIn):
                spec = self.rt.registry.get(proposal.operation)
                edited = digest(spec.normalize(decision.args))
        except CanonicalizationError as exc:
            raise ValidationFailed(str(exc)) from exc
        return value, edited, request_digest

    def _decide_locked(
        self,
        identity: Identity,
        thread_id: str,
        value: dict[str, Any],
        edited: str | None,
        rid: str,
        keep: Keep = lambda status, body: (),
    ) -> Answer:
        """Decide under the thread's lock: the answer, and `keep(answer)` committed with
        the lock's release."""
        # The checkpoint is read in the transaction that takes the lock.
        read = self.runner.reading(self.runner.config(identity, thread_id))
        try:
            try:
                held = self.store.lock_thread(thread_id, wait_s=0, read=read)
            except InProgress:  # busy: most often another click resuming it
                settled = self._answer_settled(identity, thread_id, value, edited, rid, keep)
                if settled is not None:
                    return settled
                held = self.store.lock_thread(thread_id, wait_s=self.lock_wait_s, read=read)
        except WritegateError as exc:  # still busy, or no lock session free: retry
            return status_for(exc.code), error_body(exc, rid)
        try:
            ran = self._resume(identity, thread_id, value, edited, held)
        except BaseException as exc:
            refused = _refusal(exc, rid)
            held.release(*(keep(*refused) if refused else ()))
            if refused is None:
                raise
            return refused
        # The answer is read, and stored, in the transaction that lets the thread go.
        answers: list[Answer] = []

        def finish(conn: Connection[DictRow]) -> tuple[Statement, ...]:
            reads = self.rt.store.on(conn)
            answer = _respond(lambda: self._answer_ran(identity, value, edited, ran, reads), rid)
            answers.append(answer)
            return keep(*answer)

        held.release(finish=finish)
        if not answers:  # neither the lock's session nor another could read it
            away = database_unavailable()
            return status_for(away.code), error_body(away, rid)
        return answers[-1]

    def _resume(
        self,
        identity: Identity,
        thread_id: str,
        value: dict[str, Any],
        edited: str | None,
        held: ThreadLock,
    ) -> _Ran:
        """Resume the question with the answer, if it is still open: what the run said
        and the questions it left open."""
        pid = value["proposal_id"]
        config = self.runner.config(identity, thread_id)
        messages: list[MessageView] = []
        state = held.read.state
        if stalled_in(state):  # a replica died mid-run: finish its steps
            messages += _messages(self.runner.events(None, identity, config, held, tokens=False))
            state = self.runner.state(config)
        questions = questions_in(state)
        question = questions.get(pid)
        if question is not None:
            resume: Command[Any] = Command(resume={question[0]: value})
            questions = {}  # what the run stops at, as it streams: no read after it
            run = self.runner.events(resume, identity, config, held, questions, tokens=False)
            messages += _messages(run)
            asked_again = questions.get(pid)
            if asked_again is not None and asked_again[1].get("error"):
                self._refuse_answer(identity, asked_again[1])
        return _Ran(thread_id, messages, questions, replayed=question is None)

    def _answer_ran(
        self,
        identity: Identity,
        value: dict[str, Any],
        edited: str | None,
        ran: _Ran,
        reads: LedgerReads,
    ) -> DecisionResult:
        """The result of a resume as the ledger then says it, read with `reads` (under
        the thread's lock, or its lease: an orphaned proposal is repaired here)."""
        try:
            replayed = ran.replayed
            return self._answer(
                identity, value, edited, ran.messages, ran.questions, replayed=replayed, reads=reads
            )
        except _Orphaned:
            self._repair(identity, ran.thread_id, value["proposal_id"])
            return self._answer(
                identity, value, edited, ran.messages, {}, replayed=True, lost=True, reads=reads
            )

    def resume_requester(self, proposal: Proposal) -> None:
        """After the second approval ran `proposal`: resume its requester's thread, as
        they would with a click, so that the question resolves with the receipt and the
        model's answer is on their page. Their question, if open, is answered `confirm`:
        the graph finds the proposal executed and answers with its receipt, asking
        nothing. Best effort: a thread left as it was resolves on its next run (a busy
        thread, or a refusal, say the ledger's answer to a confirm of a declined
        proposal, is an answer here like any other, and nobody reads it)."""
        requester = Identity(proposal.subject, proposal.tenant_id)
        value = {"action": "confirm", "proposal_id": proposal.proposal_id}
        self._decide_locked(requester, proposal.thread_id, value, None, "")

    def _answer_settled(
        self,
        identity: Identity,
        thread_id: str,
        value: dict[str, Any],
        edited: str | None,
        rid: str,
        keep: Keep,
    ) -> Answer | None:
        """The answer of a click that finds the thread busy, if it has nothing to resume.

        It waits for the lock shared, so that when the holder (the click that resumes,
        most often) lets go, every such click is let in at once, on every replica,
        instead of one after another. The graph is resumed only under the exclusive
        lock, so a shared holder reads what it would have read after waiting for that.
        None when the question is still open or a run stalled: then the click takes the
        exclusive lock and decides as the first one would.
        """
        read = self.runner.reading(self.runner.config(identity, thread_id))
        lock = self.store.lock_thread(thread_id, wait_s=self.lock_wait_s, shared=True, read=read)
        answer: Answer | None = None
        try:
            state = lock.read.state  # read once, as the lock was granted: it cannot change under it
            questions = questions_in(state)
            if stalled_in(state) or value["proposal_id"] in questions:
                return None

            def settled() -> DecisionResult:
                return self._answer(identity, value, edited, [], questions, replayed=True)

            try:
                answer = _respond(settled, rid)
            except _Orphaned:
                return None  # repaired under the exclusive lock
            return answer
        finally:
            lock.release(*(keep(*answer) if answer else ()))

    def _repair(self, identity: Identity, thread_id: str, pid: str) -> None:
        """Cancel an open proposal its thread no longer asks about, and tell the thread
        (the person reads it there, the model on its next turn). Only for a thread of
        this service: a proposal waiting elsewhere (MCP, a library graph) is left alone
        and the click answers `not_resumable` as it is."""
        if self.store.get_thread(identity, thread_id) is None:
            return
        try:
            self.rt.service.decide(identity, Cancel(action="cancel", proposal_id=pid))
        except ProposalNotPending:
            return  # decided some other way meanwhile: the answer reads what it became
        note = f"Approval {pid}: {LOST_QUESTION}."
        self.runner.tell(self.runner.config(identity, thread_id), note)

    def _refuse_answer(self, identity: Identity, question: dict[str, Any]) -> None:
        """The graph refused the answer and asks again: say why, with the question."""
        error = question["error"]
        exc = error_for_code(error.get("code", "invalid_decision"), error.get("message"))
        raise Refused(exc, self.runner.question_view(identity, question))

    def _answer(
        self,
        identity: Identity,
        value: dict[str, Any],
        edited: str | None,
        messages: list[MessageView],
        questions: Questions,
        *,
        replayed: bool,
        lost: bool = False,
        reads: LedgerReads | None = None,
    ) -> DecisionResult:
        """What the ledger says now about this proposal, for this action; `questions`: its
        thread's open questions, as the caller last read them under the thread's lock.
        `_Orphaned` when it is open and no question asks about it; `lost`: the caller
        has repaired that (`_repair`), and the answer says so."""
        pid, action = value["proposal_id"], value["action"]
        proposal, execution, now = self.rt.service.proposal_execution_and_now(identity, pid, reads)
        question = questions.get(pid)
        view = approval_view(
            proposal_row(proposal),
            now,
            question=question[1] if question else None,
            execution_id=execution.execution_id if execution else None,
        )

        def result(outcome: str, **extra: Any) -> DecisionResult:
            pending: list[ApprovalView] = []
            if questions:  # pending means a question is open: none is, none is pending
                approvals = self.runner.thread_approvals(
                    identity, proposal.thread_id, questions=questions, now=now
                )
                pending = [a for a in approvals if a.pending]
            return DecisionResult(
                proposal_id=pid,
                action=action,
                outcome=outcome,  # type: ignore[arg-type]
                replayed=replayed,
                approval=view,
                messages=messages,
                pending=pending,
                **extra,
            )

        status = proposal.status
        if status in (ProposalStatus.CONFIRMED, ProposalStatus.EXECUTED):
            if execution is None:
                raise Refused(
                    InProgress("confirmed; the execution has not started", proposal_id=pid), view
                )
            try:
                receipt = execution_outcome(execution)
            except WritegateError as exc:
                raise Refused(exc, view) from exc
            if action != "confirm":
                raise Refused(
                    AlreadyConsumed(proposal_id=pid, execution_id=execution.execution_id), view
                )
            return result("executed", receipt=receipt_view(receipt))
        if status in DECIDABLE:
            if now >= proposal.expires_at:
                raise Refused(ProposalExpired(proposal_id=pid), view)
            if awaiting_second(proposal) and action == "confirm":
                return result("awaiting_second_approval")  # an approver is next
            if action == "edit" and self.rt.service.edit_changes_nothing(proposal, value["args"]):
                return result("unchanged")  # the same question, still open
            if question is None and not lost:
                raise _Orphaned  # no question for an open proposal: repair it first
            raise Refused(NotResumable(proposal_id=pid), view)  # it waits elsewhere
        if status is ProposalStatus.SUPERSEDED and action == "edit" and proposal.superseded_by:
            successor = self.rt.service.get_proposal(identity, proposal.superseded_by)
            if successor.args_digest != edited:
                raise Refused(ProposalSuperseded(proposal_id=pid), view)
            asked = questions.get(successor.proposal_id)  # the same thread's
            next_view = approval_view(
                proposal_row(successor), now, question=asked[1] if asked else None
            )
            return result("edited", next_approval=next_view)
        if (status, action) in _SAME_END:
            return result(status.value)
        if lost and status is ProposalStatus.CANCELLED:
            raise Refused(NotResumable(LOST_QUESTION, proposal_id=pid), view)
        ended = proposal_error(status, pid)
        raise Refused(ended or ProposalNotPending(proposal_id=pid, state=status.value), view)


def _respond(decided: Callable[[], DecisionResult], rid: str) -> Answer:
    """The status and body of a decision, or of the refusal it met."""
    try:
        return 200, decided().model_dump(mode="json")
    except (Refused, WritegateError) as exc:
        refused = _refusal(exc, rid)
        assert refused is not None
        return refused


def _refusal(exc: BaseException, rid: str) -> Answer | None:
    """The status and body of a refusal; None for any other exception."""
    if isinstance(exc, Refused):
        return status_for(exc.error.code), error_body(exc.error, rid, exc.state)
    if isinstance(exc, WritegateError):
        return status_for(exc.code), error_body(exc, rid)
    return None


def _messages(events: Any) -> list[MessageView]:
    return [payload for kind, payload in events if kind == "message"]


def _replayed(status: int, body: dict[str, Any], rid: str) -> dict[str, Any]:
    """A stored answer, told apart from a fresh one."""
    if status == 200:
        return {**body, "replayed": True}
    return {**body, "request_id": rid, "details": {**(body.get("details") or {}), "replayed": True}}
