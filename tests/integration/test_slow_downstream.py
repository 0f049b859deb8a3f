"""A downstream slower than writegate's deadline, or whose client gives up after it
applied: a call that may have applied is never sent again blindly.

Effects are counted at a service the test owns (`slow_service.py`: it does not
deduplicate); what the model is told is read from its ToolMessage, what happened
from the ledger and the audit trail.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from tests.integration.fault_scripts.harness import ROOT, wait_until
from tests.integration.slow_service import (
    DEADLINE,
    SlowClient,
    SlowService,
    confirmed_write,
    pay_call,
    slow_tool,
)
from writegate import (
    RateLimited,
    RetryPolicy,
    TemporarilyUnavailable,
    UpstreamTimeout,
    Writegate,
    write_tool,
)
from writegate.approval.reconcile import ReconcilePolicy

pytestmark = pytest.mark.slow

EXECUTION_SQL = "SELECT status, error_code, escalation, attempts FROM writegate.executions"
AUDIT_SQL = """
SELECT event, status, error_code FROM writegate.audit
WHERE event IN ('execute', 'reconcile') ORDER BY audit_id"""


@pytest.fixture
def service() -> Iterator[SlowService]:
    server = SlowService().start()
    yield server
    server.stop()


def arrived(service: SlowService) -> None:
    """The first POST reached the service (it may lag the caller's deadline a little)."""
    wait_until(lambda: service.post_count() >= 1, "the first POST at the service")


def execution(wg: Writegate) -> dict[str, Any]:
    with wg.runtime.pool.connection() as conn:
        (row,) = conn.execute(EXECUTION_SQL).fetchall()
    return dict(row)


def audit(wg: Writegate) -> list[tuple[str, str, str | None]]:
    with wg.runtime.pool.connection() as conn:
        rows = conn.execute(AUDIT_SQL).fetchall()
    return [(r["event"], r["status"], r["error_code"]) for r in rows]


def test_a_service_slower_than_the_deadline_gets_one_post_and_its_late_answer_settles_it(
    create_database: Callable[[], str], service: SlowService
) -> None:
    tool = slow_tool(service.url, retry=DEADLINE)  # no lookup, no deduplication
    with Writegate.open(create_database(), tools=[tool]) as wg:
        told = confirmed_write(wg, pay_call())
        # The deadline passed while the service still holds the request: the model is
        # told the outcome is unknown, not a success and not a failure.
        assert not service.release.is_set()
        assert told["code"] == "outcome_unknown"
        arrived(service)
        assert service.post_count() == 1
        assert execution(wg)["status"] == "unknown"
        # Nobody sends it again while it may still be running: a reconciler finds
        # nothing to claim (without the hold it would escalate a call still in flight).
        assert wg.reconciler().drain() == []
        assert service.post_count() == 1

        service.release.set()  # the slow answer arrives: a success
        wait_until(lambda: execution(wg)["status"] == "succeeded", "the late answer recorded")
        assert service.post_count() == 1
        assert audit(wg) == [
            ("execute", "unknown", "deadline_exceeded"),
            ("execute", "succeeded", None),
        ]
        assert wg.reconciler().drain() == []


def test_a_lookup_saying_never_seen_does_not_resend_while_the_first_call_runs(
    create_database: Callable[[], str], service: SlowService
) -> None:
    tool = slow_tool(service.url, with_lookup=True, retry=DEADLINE)
    with Writegate.open(create_database(), tools=[tool]) as wg:
        told = confirmed_write(wg, pay_call())
        assert told["code"] == "outcome_unknown"
        # The service has not applied it yet, so its lookup would say "never seen";
        # a reconciler that claimed it now would send it a second time.
        assert wg.reconciler().drain() == []
        arrived(service)
        assert service.post_count() == 1
        service.release.set()
        wait_until(lambda: execution(wg)["status"] == "succeeded", "the late answer recorded")
        assert service.post_count() == 1


def test_a_reconcilers_resend_past_the_deadline_is_held_until_it_answers(
    create_database: Callable[[], str], service: SlowService
) -> None:
    client, calls = SlowClient(service.url), []

    def pay_slowly(account: str, cents: int, *, request_key: str) -> Any:
        """Pay an amount into an account; the first try breaks before it is sent.

        Args:
            account: The account id.
            cents: Amount in cents.
        """
        calls.append(request_key)
        if len(calls) == 1:
            raise ConnectionResetError("reset while connecting")  # unknown to writegate
        return client.pay(account, cents, request_key)

    tool = write_tool(pay_slowly, side_effect="external", lookup=client.lookup, retry=DEADLINE)
    with Writegate.open(create_database(), tools=[tool]) as wg:
        assert confirmed_write(wg, pay_call())["code"] == "outcome_unknown"
        again = ReconcilePolicy(backoff=0.0)  # a deferred execution is due again at once
        settled = wg.reconciler(policy=again).drain()  # never seen: sent again, and it hangs
        assert [(s.previous_status, s.status, s.action) for s in settled] == [
            ("unknown", "unknown", "deferred")
        ]
        arrived(service)
        assert service.post_count() == 1
        assert wg.reconciler(policy=again).drain() == []  # its send is still running
        service.release.set()
        wait_until(lambda: execution(wg)["status"] == "succeeded", "the late answer recorded")
        assert service.post_count() == 1 and len(calls) == 2


class Downstream:
    """A deduplicating downstream whose client can be made to fail after applying."""

    def __init__(self, first_answer: Exception | None) -> None:
        self.first_answer = first_answer
        self.keys: list[str] = []  # the request key of every call
        self.effects: dict[str, dict[str, Any]] = {}

    def tool(self, **declared: Any) -> Any:
        @write_tool(side_effect="external", **declared)
        def pay_slowly(account: str, cents: int, *, request_key: str) -> dict[str, Any]:
            """Pay an amount into an account.

            Args:
                account: The account id.
                cents: Amount in cents.
            """
            self.keys.append(request_key)
            fail, self.first_answer = self.first_answer, None
            if isinstance(fail, (RateLimited, TemporarilyUnavailable)):
                raise fail  # an explicit "not applied": nothing was stored
            self.effects.setdefault(request_key, {"account": account, "cents": cents})
            if fail is not None:
                raise fail  # applied, then the client gave up or the connection broke
            return {"payment": request_key}

        return pay_slowly


@pytest.mark.parametrize(
    ("dedupes", "keys_sent", "told"),
    [(True, 2, "succeeded"), (False, 1, "outcome_unknown")],
    ids=["declared", "not-declared"],
)
def test_a_client_timeout_after_applying_is_resent_only_when_the_tool_deduplicates(
    create_database: Callable[[], str], dedupes: bool, keys_sent: int, told: str
) -> None:
    downstream = Downstream(UpstreamTimeout("client timeout after the service applied"))
    tool = downstream.tool(dedupes_by_key=dedupes)
    with Writegate.open(create_database(), tools=[tool]) as wg:
        answer = confirmed_write(wg, pay_call())
        assert answer.get("status", answer.get("code")) == told
        assert len(downstream.keys) == keys_sent and len(set(downstream.keys)) == 1
        assert len(downstream.effects) == 1  # deduplicated downstream: one effect
        assert execution(wg)["status"] == ("succeeded" if dedupes else "unknown")


@pytest.mark.parametrize(
    ("first", "keys_sent", "told"),
    [
        (RateLimited("429 from the service"), 2, "succeeded"),
        (TemporarilyUnavailable("503 from the service"), 2, "succeeded"),
        (ConnectionResetError("connection reset after sending"), 1, "outcome_unknown"),
    ],
    ids=["429", "503", "exception"],
)
def test_only_an_explicit_not_applied_answer_is_retried_with_the_same_key(
    create_database: Callable[[], str], first: Exception, keys_sent: int, told: str
) -> None:
    downstream = Downstream(first)
    with Writegate.open(create_database(), tools=[downstream.tool()]) as wg:
        answer = confirmed_write(wg, pay_call())
        assert answer.get("status", answer.get("code")) == told
        assert len(downstream.keys) == keys_sent and len(set(downstream.keys)) == 1
        assert len(downstream.effects) == 1


def test_a_straggler_past_the_overrun_limit_goes_to_a_person_and_its_answer_is_kept(
    create_database: Callable[[], str], service: SlowService
) -> None:
    short = RetryPolicy(
        call_timeout=0.5, lease=timedelta(seconds=1), overrun_limit=timedelta(seconds=1)
    )
    with Writegate.open(create_database(), tools=[slow_tool(service.url, retry=short)]) as wg:
        assert confirmed_write(wg, pay_call())["code"] == "outcome_unknown"
        wait_until(lambda: execution(wg)["status"] == "escalated", "the escalation")
        assert execution(wg)["escalation"]["reason"] == "still_running_past_limit"
        assert wg.reconciler().drain() == []  # a person decides now, not the reconciler
        service.release.set()
        wait_until(lambda: execution(wg)["status"] == "succeeded", "the late answer recorded")
        assert service.post_count() == 1


CHILD = "tests.integration.slow_child"


def test_a_process_killed_while_its_call_overran_is_reconciled_after_its_lease(
    create_database: Callable[[], str], service: SlowService
) -> None:
    url = create_database()
    child = subprocess.Popen(
        [sys.executable, "-m", CHILD, service.url],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": url},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        told = json.loads(child.stdout.readline())
        arrived(service)
        assert told["code"] == "outcome_unknown" and service.post_count() == 1
        with Writegate.open(url, tools=[slow_tool(service.url, retry=DEADLINE)]) as wg:
            assert wg.reconciler().drain() == []  # held by the live process
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=30)
            # Its lease runs out; the call died with the process, so the reconciler may
            # take it: without a lookup, a person decides. Nothing is sent again.
            settled: list[Any] = []
            wait_until(lambda: settled.extend(wg.reconciler().drain()) or settled, "a claim")
            assert [(s.previous_status, s.action) for s in settled] == [("unknown", "escalated")]
            assert execution(wg)["escalation"]["reason"] == "no_lookup"
        assert service.post_count() == 1
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
