"""A write's deadline and second sends: the policy a tool may carry (`ToolSpec.retry`)
and the executor's default, read by approval/downstream.py, which applies it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

# The execution lease's default: the docs quote it from here (tests/unit/test_lease_default.py).
DEFAULT_LEASE = timedelta(seconds=30)


@dataclass(frozen=True)
class RetryPolicy:
    """A write's deadline, and when its downstream call is sent again.

    - `call_timeout`: writegate's deadline for one attempt, in seconds. At it the caller
      is answered `outcome_unknown`; the attempt is held until it ends, never re-sent.
    - `max_retries`, `base_delay`, `max_delay`: second sends after "not applied" (429,
      503), or after "may have applied" by a tool declaring `dedupes_by_key`; the delay
      doubles per retry, up to `max_delay`.
    - `lease`: how long a claim on an execution holds without renewal. It must outlast
      the deadline, so that no reconciler takes over an attempt in flight; a process
      that dies stops renewing, and after `lease` the reconciler takes its executions.
    - `overrun_limit`: how long, from its start, an attempt past its deadline is held
      before a person is asked to decide; its answer, should it still come, is recorded.
    """

    max_retries: int = 2
    base_delay: float = 0.2
    max_delay: float = 5.0
    call_timeout: float = 10.0
    lease: timedelta = DEFAULT_LEASE
    overrun_limit: timedelta = timedelta(minutes=10)

    def __post_init__(self) -> None:
        if min(self.max_retries, self.base_delay, self.max_delay) < 0:
            raise ValueError("max_retries, base_delay and max_delay cannot be negative")
        if not self.call_timeout > 0:
            raise ValueError("call_timeout must be a positive number of seconds")
        if not self.lease.total_seconds() > self.call_timeout:
            raise ValueError(
                f"the lease ({self.lease.total_seconds():g} s) must outlast the deadline "
                f"(call_timeout {self.call_timeout:g} s), or a reconciler could take over "
                "a call still in flight"
            )
        if not self.overrun_limit.total_seconds() > self.call_timeout:
            raise ValueError("overrun_limit must be longer than call_timeout")

    def delay(self, attempt: int) -> float:
        return float(min(self.base_delay * 2**attempt, self.max_delay))
