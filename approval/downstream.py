"""Calling the downstream: one request key, a deadline per attempt, and a second send
only when the first one did not apply, or cannot apply twice.

Each attempt runs the tool's function on a worker thread, under writegate's deadline
(`RetryPolicy.call_timeout`), and ends one of four ways:

- an answer: the result, or a refusal the tool raised as a writegate error (it did not
  apply: `state_changed`, `execution_failed`, ...). Recorded; never sent again.
- "not applied": `rate_limited` or `temporarily_unavailable`, an explicit 429 or 503
  that the tool's client raised as writegate's error. Sent again with the same key,
  with backoff, at most `max_retries` times.
- "may have applied": `upstream_timeout` raised by the client, a broken connection,
  any other exception. The execution becomes `unknown`, for the reconciler's lookup or
  a person. Sent again (same key) only to a tool that declared `dedupes_by_key`: its
  downstream drops a repeated key, so a second send cannot apply twice.
- no answer within the deadline: `Overrun` (`deadline_exceeded`). Python cannot stop
  the call, so it keeps running on its thread; nobody may send the request again while
  it may still run, not even to a deduplicating tool. The caller records `unknown` and
  holds the execution until the attempt ends (approval/straggler.py).

Before every second send the caller's `hold()` renews its lease to cover that send; a
lease lost meanwhile means someone else took the execution over: nothing more is sent.
"""

from __future__ import annotations

import contextvars
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from writegate.approval.errors import (
    MAY_HAVE_APPLIED_CODES,
    NOT_APPLIED_CODES,
    DeadlineExceeded,
    UpstreamTimeout,
    WritegateError,
)
from writegate.approval.models import ExecutionStatus
from writegate.approval.retry import RetryPolicy
from writegate.approval.spec import DownstreamResult, ToolSpec


def outcome_status(outcome: DownstreamResult | WritegateError) -> ExecutionStatus:
    """Where a downstream answer leaves an execution. A timeout is not a failure."""
    if isinstance(outcome, DownstreamResult):
        return ExecutionStatus.SUCCEEDED
    if outcome.code in MAY_HAVE_APPLIED_CODES:
        return ExecutionStatus.UNKNOWN
    if outcome.code in NOT_APPLIED_CODES:
        return ExecutionStatus.FAILED_RETRYABLE
    return ExecutionStatus.FAILED_TERMINAL


class Attempt:
    """One call of the tool's function on a worker thread; it may outlive its caller."""

    def __init__(self, spec: ToolSpec, args: dict[str, Any], request_key: str) -> None:
        self.started = time.monotonic()
        self.done = threading.Event()
        self._answer: DownstreamResult | None = None
        self._error: BaseException | None = None

        def run() -> None:
            try:
                self._answer = spec.call_downstream(args, request_key)
            except BaseException as exc:  # reported by `outcome()`, on the caller's side
                self._error = exc

        # In a copy of this context, so `acting_identity()` holds in the call too.
        WORKERS.submit(contextvars.copy_context(), run, self.done)

    def outcome(self) -> DownstreamResult | WritegateError:
        """Once `done`: the answer, or what its exception means."""
        if isinstance(self._error, WritegateError):
            return self._error
        if self._error is not None:  # the downstream may have acted
            return UpstreamTimeout(f"downstream call failed: {type(self._error).__name__}")
        assert self._answer is not None
        return self._answer


class Overrun(DeadlineExceeded):
    """`deadline_exceeded`, with the attempt that is still running, for the caller to hold."""

    def __init__(self, attempt: Attempt, timeout: float) -> None:
        super().__init__(
            f"no answer within {timeout:g} s; the call may still be running", timeout_s=timeout
        )
        self.attempt = attempt


def call_with_retries(
    spec: ToolSpec,
    args: dict[str, Any],
    request_key: str,
    retry: RetryPolicy,
    *,
    hold: Callable[[], bool],
    sleep: Callable[[float], None] = time.sleep,
) -> DownstreamResult | WritegateError:
    """Same request key every attempt; a second send only as the module docstring says.

    `hold()` runs before each second send and renews the caller's lease on the
    execution; False (the lease was lost) ends the loop with nothing more sent. Once an
    attempt may have applied, the answer stays "may have applied" even if a later one
    only got a 503: a later refusal does not undo an earlier attempt that may have acted.
    """
    dedupes = spec.dedupes_by_key
    attempt, ambiguous = 0, False
    while True:
        running = Attempt(spec, args, request_key)
        if not running.done.wait(retry.call_timeout):
            return Overrun(running, retry.call_timeout)  # still running: never sent again
        outcome = running.outcome()
        if isinstance(outcome, DownstreamResult):
            return outcome
        may_have_applied = outcome.code in MAY_HAVE_APPLIED_CODES
        ambiguous = ambiguous or may_have_applied
        again = outcome.code in NOT_APPLIED_CODES or (may_have_applied and dedupes)
        if again and attempt < retry.max_retries:
            sleep(retry.delay(attempt))
            attempt += 1
            if hold():
                continue
        if ambiguous and outcome.code in NOT_APPLIED_CODES:
            return UpstreamTimeout("an earlier attempt may have applied", last_error=outcome.code)
        return outcome


Job = tuple[contextvars.Context, Callable[[], None], threading.Event]


class Workers:
    """Daemon threads for deadline-bound calls: an idle one is reused, else one starts.

    A call never waits behind another, so one that hangs past its deadline costs a
    thread, as a fresh thread per call did, and not the calls after it; what reuse
    saves is starting a thread per write. A worker idle for `idle_timeout` seconds
    ends. Threads are daemons: a hung call does not hold the process open at exit.
    """

    def __init__(self, idle_timeout: float = 60.0) -> None:
        self.idle_timeout = idle_timeout
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[Job]] = []  # the newest idle worker last

    def submit(
        self, context: contextvars.Context, job: Callable[[], None], done: threading.Event
    ) -> None:
        """Run `job` in `context` on a worker, then set `done`. The worker is idle again
        by the time `done` is set, so calls made one after another share one thread."""
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            threading.Thread(
                target=self._work, args=(inbox,), name="writegate downstream", daemon=True
            ).start()
        inbox.put((context, job, done))

    def idle(self) -> int:
        with self._lock:
            return len(self._idle)

    def _work(self, inbox: queue.SimpleQueue[Job]) -> None:
        while True:
            try:
                context, job, done = inbox.get(timeout=self.idle_timeout)
            except queue.Empty:
                with self._lock:
                    if inbox in self._idle:  # nobody took this worker meanwhile: end
                        self._idle.remove(inbox)
                        return
                continue  # a caller took it just now; its job is on the way
            try:
                context.run(job)
            finally:
                del context, job  # hold nothing of a finished call while idle
                with self._lock:
                    self._idle.append(inbox)
                done.set()

    def forget(self) -> None:
        """In a forked child: the parent's workers are not there, so none is idle."""
        self._lock = threading.Lock()
        self._idle = []


WORKERS = Workers()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=WORKERS.forget)
