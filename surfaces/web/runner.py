"""Run the writegate graph for the HTTP service.

The run config comes from the API key (user, tenant, roles) and the thread, never
from a request body. A run yields events: `token` (a model's text as it streams),
`message` (each complete message), `approval` (an interrupt asking for a decision),
and the caller adds `end`. Questions are read back from the checkpoint: an open
interrupt whose value names a proposal is that proposal's question.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.types import Interrupt, StateSnapshot, StreamMode
from psycopg import Connection
from psycopg.rows import DictRow

from writegate.approval.errors import ApprovalPending
from writegate.approval.models import PENDING, Identity, ProposalStatus
from writegate.checkpoints.saver import Primed, Saver, copied
from writegate.graph.messages import executed_values
from writegate.runtime.wiring import Runtime
from writegate.surfaces.store.http_store import HttpStore, Read, ThreadLock
from writegate.surfaces.web.schemas import ApprovalView, MessageView
from writegate.surfaces.web.views import approval_view, message_view, proposal_row

RunEvent = tuple[str, Any]
Questions = dict[str, tuple[str, dict[str, Any]]]  # proposal id -> (interrupt id, value)


@dataclass
class Preparation:
    """What must run on a thread before new input: a crashed run, expired questions."""

    resume: dict[str, Any] = field(default_factory=dict)
    recover: bool = False


@dataclass(frozen=True)
class ThreadRead:
    """A thread's checkpoint as read under its lock (`Runner.reading`): its snapshot, and
    the saver the lock holder's runs use, which gives the first of them that read
    instead of reading the checkpoint again (later runs read what the earlier wrote)."""

    state: StateSnapshot
    saver: Primed


def _expires(value: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(str(value["expires_at"]))


def questions_in(state: StateSnapshot) -> Questions:
    """The open questions of a checkpoint: interrupts whose value names a proposal."""
    return questions_in_interrupts(state.interrupts)


def questions_in_interrupts(interrupts: Iterable[Interrupt]) -> Questions:
    """The interrupts whose value names a proposal, by proposal id."""
    found: Questions = {}
    for intr in interrupts:
        value = intr.value
        if isinstance(value, dict) and isinstance(value.get("proposal_id"), str):
            found[value["proposal_id"]] = (intr.id, value)
    return found


def stalled_in(state: StateSnapshot) -> bool:
    """A run that stopped between steps (its process died) with no question open."""
    return bool(state.next) and not state.interrupts


class Runner:
    def __init__(self, runtime: Runtime, graph: Any, store: HttpStore, *, tokens: bool) -> None:
        """`tokens`: the graph's model can stream its text (`graph.model.streams_tokens`);
        if not, no run asks for a token stream."""
        self.rt = runtime
        self.graph = graph
        self.store = store
        self.tokens = tokens

    @staticmethod
    def config(identity: Identity, thread_id: str) -> RunnableConfig:
        return {
            "configurable": {
                "thread_id": thread_id,
                "user_id": identity.user_id,
                "tenant_id": identity.tenant_id,
                "roles": sorted(identity.roles),
            }
        }

    def state(self, config: RunnableConfig) -> StateSnapshot:
        """The thread's checkpoint, read once: a caller that needs both its questions and
        whether it stalled reads it through `questions_in` and `stalled_in`."""
        state: StateSnapshot = self.graph.get_state(config)
        return state

    def reading(self, config: RunnableConfig) -> Read:
        """The thread's checkpoint read on a session given later: the thread lock's, in
        the transaction that takes it (`HttpStore.lock_thread(read=...)`), as of the
        lock's grant and without a commit of its own. Gives a `ThreadRead`: the
        snapshot, and the checkpoint the lock holder's first run starts from. Only the
        thread's id in `config` counts: a checkpoint is the thread's, whoever reads it."""
        thread_id = str(config["configurable"]["thread_id"])

        def read(conn: Connection[DictRow]) -> ThreadRead:
            saver = Saver(conn, serde=self.rt.checkpointer.serde)
            saved = saver.get_tuple(config)
            primed = Primed(saver, thread_id, copied(saved))
            state: StateSnapshot = self.graph.copy({"checkpointer": primed}).get_state(config)
            return ThreadRead(state, Primed(self.rt.checkpointer, thread_id, saved))

        return read

    def questions(self, config: RunnableConfig) -> Questions:
        """proposal id -> (interrupt id, interrupt value) for the thread's open questions."""
        return questions_in(self.state(config))

    def prepare(self, identity: Identity, state: StateSnapshot) -> Preparation:
        """Refuse new input while a live question waits; close the others first.
        `state`: the thread's checkpoint, read under its lock (`reading`).

        An expired question is answered `cancel`: the service sees the expiry (on the
        database clock) and records `expired`, whatever the answer, so nothing runs. A
        question whose proposal the ledger has settled elsewhere (a second approver's
        decision whose push to this thread was lost) is answered `confirm`, as that
        push would have: the graph reads the ledger and answers with the receipt, or
        with how it ended, and runs nothing.
        """
        questions = questions_in(state)
        if questions:
            now = self.rt.views.now()
            live = [pid for pid, (_, v) in questions.items() if now < _expires(v)]
            waiting = sorted(pid for pid in live if not self._settled(identity, pid))
            if waiting:
                raise ApprovalPending(proposal_ids=waiting)
            return Preparation(
                resume={
                    iid: {"action": "confirm" if pid in live else "cancel", "proposal_id": pid}
                    for pid, (iid, _) in questions.items()
                }
            )
        return Preparation(recover=stalled_in(state))

    def _settled(self, identity: Identity, proposal_id: str) -> bool:
        """The ledger decided this proposal without its thread: nobody is asked any more
        (executed, declined, revoked, ...), or a second approval ran it."""
        proposal = self.rt.service.get_proposal(identity, proposal_id)
        if proposal.status is ProposalStatus.CONFIRMED:
            return proposal.second_approver is not None
        return proposal.status not in PENDING

    def events(
        self,
        value: Any,
        identity: Identity,
        config: RunnableConfig,
        held: ThreadLock,
        asked: Questions | None = None,
        *,
        tokens: bool = True,
    ) -> Iterator[RunEvent]:
        """Stream one graph run as events, until it ends or stops at a question. `held`:
        the thread's lock, kept between steps (a lost lease stops the run there).
        `asked` gets the questions the run stopped at: the thread's open questions once
        it has ended (a run stops at the step that asks, and LangGraph streams every
        interrupt of that step, those asked again after a resume included). `tokens`:
        also the model's text as it comes (LangGraph's `messages` mode, whose callbacks
        on every step cost about 2 ms of CPU a run), if the model can stream it; a caller
        that answers with one body (a decision) asks for none."""
        streamed = tokens and self.tokens
        modes: list[StreamMode] = ["messages", "updates"] if streamed else ["updates"]
        stream = self._graph_for(held).stream(value, config, stream_mode=modes)
        for mode, chunk in stream:
            held.keep()
            if mode == "messages":
                message, _meta = chunk
                if isinstance(message, AIMessageChunk) and message.text:
                    yield "token", {"message_id": message.id, "delta": message.text}
                continue
            for node, update in chunk.items():
                if node == "__interrupt__":
                    for intr in update:
                        if asked is not None:
                            asked.update(questions_in_interrupts([intr]))
                        yield "approval", self.question_view(identity, intr.value)
                elif isinstance(update, dict):
                    for message in update.get("messages") or []:
                        if isinstance(message, BaseMessage):
                            yield "message", message_view(message)

    def _graph_for(self, held: ThreadLock) -> Any:
        """The graph, on the saver of the checkpoint read as the lock was taken
        (`reading`), if it was."""
        read = held.read
        if not isinstance(read, ThreadRead):
            return self.graph
        return self.graph.copy({"checkpointer": read.saver})

    def tell(self, config: RunnableConfig, text: str) -> None:
        """Add the assistant's note to the thread, ending its turn there: the person
        reads it in the thread, the model with the next message."""
        self.graph.update_state(config, {"messages": [AIMessage(text)]}, as_node="agent")

    def question_view(self, identity: Identity, value: dict[str, Any]) -> ApprovalView:
        # The proposal and the ledger's clock in one read.
        proposal, _, now = self.rt.service.proposal_execution_and_now(
            identity, value["proposal_id"]
        )
        return approval_view(proposal_row(proposal), now, question=value)

    def thread_approvals(
        self,
        identity: Identity,
        thread_id: str,
        *,
        questions: Questions | None = None,
        now: datetime | None = None,
    ) -> list[ApprovalView]:
        """Every proposal of the thread, oldest first, marked pending where a question is
        open. `questions` and `now`: as the caller just read them, not read again."""
        rows = self.rt.views.thread_proposals(identity, thread_id)
        if questions is None:
            questions = self.questions(self.config(identity, thread_id)) if rows else {}
        now = self.rt.views.now() if now is None else now
        return [
            approval_view(
                row,
                now,
                question=questions.get(row["proposal_id"], ("", None))[1],
                execution_id=row["execution_id"],
            )
            for row in rows
        ]

    @staticmethod
    def messages(state: StateSnapshot) -> list[MessageView]:
        """The thread's messages in a checkpoint read with `state`."""
        messages = state.values.get("messages", [])
        executed = executed_values(messages)
        return [message_view(m, executed) for m in messages]
