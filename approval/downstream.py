"""Calling the downstream: one request key, transient errors retried, a deadline per call.

Only `upstream_timeout`, `temporarily_unavailable` and `rate_limited` are retried, at most
`max_retries` times with exponential backoff, always with the same request key. An answer
that may hide an applied request (a timeout, a broken connection) is `upstream_timeout`,
which the ledger records as `unknown`, never as a failure.
"""

from __future__ import annotations

import contextvars
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from writegate.approval.errors import RETRYABLE_CODES, UpstreamTimeout, WritegateError
from writegate.approval.models import ExecutionStatus
from writegate.approval.spec import DownstreamResult, ToolSpec


@dataclass(frozen=True)
class RetryPolicy:
    """Only transient downstream errors are retried, at most twice, same request key.

    `call_timeout` bounds each downstream call (None: the client's own timeout only);
    a call that overruns it is abandoned as `upstream_timeout`, i.e. it may still
    apply. The lease should outlast the worst case, (max_retries + 1) calls plus
    backoff, or a healthy worker gets reconciled under its feet (safe, but wasted).
    """

    max_retries: int = 2
    base_delay: float = 0.2
    max_delay: float = 5.0
    lease: timedelta = timedelta(seconds=30)
    call_timeout: float | None = 10.0

    def delay(self, attempt: int) -> float:
        return float(min(self.base_delay * 2**attempt, self.max_delay))


def outcome_status(outcome: DownstreamResult | WritegateError) -> ExecutionStatus:
    """Where a downstream answer leaves an execution. A timeout is not a failure."""
    if isinstance(outcome, DownstreamResult):
        return ExecutionStatus.SUCCEEDED
    if isinstance(outcome, UpstreamTimeout):  # it may have applied
        return ExecutionStatus.UNKNOWN
    if outcome.code in RETRYABLE_CODES:
        return ExecutionStatus.FAILED_RETRYABLE
    return ExecutionStatus.FAILED_TERMINAL


def call_with_retries(
    spec: ToolSpec,
    args: dict[str, Any],
    request_key: str,
    retry: RetryPolicy,
    sleep: Callable[[float], None] = time.sleep,
) -> DownstreamResult | WritegateError:
    """Same request key every attempt; only transient codes are retried.

    Once any attempt may have applied (a timeout, a broken connection), the
    answer stays `upstream_timeout` even if later attempts only got 503s: a
    later refusal to answer does not undo an earlier attempt that may have acted.
    """
    attempt, ambiguous = 0, False
    while True:
        try:
            return _call_once(spec, args, request_key, retry.call_timeout)
        except WritegateError as exc:
            ambiguous = ambiguous or isinstance(exc, UpstreamTimeout)
            if exc.code not in RETRYABLE_CODES or attempt >= retry.max_retries:
                if ambiguous and exc.code in RETRYABLE_CODES:
                    return UpstreamTimeout(
                        "an earlier attempt may have applied", last_error=exc.code
                    )
                return exc
        except Exception as exc:  # the downstream may have acted: unknown, not retried
            return UpstreamTimeout(f"downstream call failed: {type(exc).__name__}")
        sleep(retry.delay(attempt))
        attempt += 1


def _call_once(
    spec: ToolSpec, args: dict[str, Any], request_key: str, timeout: float | None
) -> DownstreamResult:
    if timeout is None:
        return spec.call_downstream(args, request_key)
    # Another thread, so any downstream gets a deadline; an overrun call is abandoned,
    # not stopped, which is why the answer is "unknown" and the key stays the same.
    box: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["result"] = spec.call_downstream(args, request_key)
        except BaseException as exc:
            box["error"] = exc

    # The call runs in a copy of this context, so `acting_identity()` holds there too.
    WORKERS.submit(contextvars.copy_context(), run, done)
    if not done.wait(timeout):
        raise UpstreamTimeout(f"no answer within {timeout:g} s", timeout_s=timeout)
    if "error" in box:
        raise box["error"]
    result: DownstreamResult = box["result"]
    return result


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
