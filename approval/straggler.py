"""An attempt that overran its deadline: this process holds its execution until it ends.

Python cannot stop a call that is past writegate's deadline: it keeps running on its
worker thread. The caller was answered `outcome_unknown` and the execution recorded
`unknown`, but its lease stays with this process: `Straggler` renews it while the
attempt runs, so no reconciler claims the execution, and nobody sends the request again
while it may still be running.

When the attempt ends, its answer is recorded as any answer is, guarded by that lease
(`settle`, the executor's): a result or a refusal settles the execution; "may have
applied" leaves it `unknown` with the lease released, for the reconciler's lookup or a
person. An attempt still running `RetryPolicy.overrun_limit` after it started is
escalated to a person (reason `still_running_past_limit`); should its answer come after
all, it is recorded then, so the person sees it.

If this process dies, renewal stops and the lease runs out. The attempt died with the
process, so the reconciler may then take the execution: a lookup, or a person.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from writegate.approval.audit import reconcile_audit
from writegate.approval.downstream import Attempt, RetryPolicy
from writegate.approval.errors import WritegateError
from writegate.approval.models import Execution, ExecutionStatus
from writegate.approval.spec import DownstreamResult
from writegate.approval.store import LedgerStore, LedgerTx

log = logging.getLogger("writegate.downstream")

ACTOR = "system:deadline"
UNKNOWN = (ExecutionStatus.UNKNOWN,)
# The answer of a held attempt, written under the lease: the execution as settled, or
# None when the guard found it changed by someone else.
Settle = Callable[[LedgerTx, DownstreamResult | WritegateError], Execution | None]


@dataclass
class Straggler:
    store: LedgerStore
    execution: Execution  # as recorded at the deadline: unknown, our lease
    owner: str
    attempt: Attempt
    policy: RetryPolicy
    settle: Settle

    def start(self) -> None:
        threading.Thread(target=self._watch, name="writegate straggler", daemon=True).start()

    def _watch(self) -> None:
        lease = self.policy.lease.total_seconds()
        every = lease / 3
        limit = self.attempt.started + self.policy.overrun_limit.total_seconds()
        held_until = time.monotonic() + lease
        while not self.attempt.done.wait(every):
            past_limit = time.monotonic() >= limit
            held = self._step(self._escalate if past_limit else self._renew)
            if held is False:
                return  # someone else changed the execution: write nothing
            if held:
                held_until = time.monotonic() + lease
                if past_limit:
                    self.attempt.done.wait()  # a person decides now; the answer still counts
        # The attempt ended: record its answer, tried again while the lease is surely ours.
        while self._step(self._record) is None and time.monotonic() < held_until:
            threading.Event().wait(every)

    def _step(self, step: Callable[[LedgerTx], bool]) -> bool | None:
        """One guarded write in its own transaction: True done, False the guard failed
        (the execution is not ours to change), None the database could not be reached."""
        try:
            with self.store.transaction() as tx:
                return step(tx)
        except Exception:
            log.exception("holding execution %s past its deadline", self.execution.execution_id)
            return None

    def _renew(self, tx: LedgerTx) -> bool:
        kept = tx.transition_execution(
            self.execution.execution_id,
            UNKNOWN,
            ExecutionStatus.UNKNOWN,
            require_owner=self.owner,
            lease_seconds=self.policy.lease.total_seconds(),
            error_code=self.execution.error_code,
        )
        return kept is not None

    def _escalate(self, tx: LedgerTx) -> bool:
        reason = {
            "reason": "still_running_past_limit",
            "overrun_limit_s": self.policy.overrun_limit.total_seconds(),
            "last_error": self.execution.error_code,
        }
        done = tx.transition_execution(
            self.execution.execution_id,
            UNKNOWN,
            ExecutionStatus.ESCALATED,
            require_owner=self.owner,
            error_code=self.execution.error_code,
            escalation=reason,
        )
        if done is None:
            return False
        detail = {"action": "escalated", "from": "unknown", "worker": self.owner}
        tx.insert_audit(reconcile_audit(done, ACTOR, {**detail, "escalation": reason}))
        return True

    def _record(self, tx: LedgerTx) -> bool:
        return self.settle(tx, self.attempt.outcome()) is not None
