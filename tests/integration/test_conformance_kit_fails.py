"""The kit can fail: each deliberately broken tool (or writegate itself, patched to
run a write twice) fails the scenario that guards against it, with a message that
says what is wrong."""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from tests.integration.library_helpers import TENANT, USER, balance, new_account
from writegate import Identity, NotFound, read_tool, write_tool
from writegate.approval.execution import Executor
from writegate.approval.models import Execution
from writegate.approval.service import ApprovalService
from writegate.approval.spec import DownstreamResult, ToolContext, ToolSpec
from writegate.testing import (
    Outcome,
    ReadScenario,
    Report,
    Scenario,
    check_read_tool,
    check_write_tool,
)

ME = Identity("user_kit", "tenant_kit")
SENT: list[dict[str, Any]] = []  # every call any broken downstream received
RECORD: dict[str, dict[str, Any]] = {}  # an idempotent downstream's record, by key
ACCOUNTS: dict[str, str] = {}


def own_account(args: dict[str, Any], identity: Identity) -> int:
    if ACCOUNTS.get(args["account"]) != identity.user_id:
        raise NotFound("no such account for this user", account=args["account"])
    return 1


def fresh_account() -> dict[str, Any]:
    account = f"acct_{secrets.token_hex(4)}"
    ACCOUNTS[account] = ME.user_id
    return {"account": account, "cents": 700}


def run(tool: Any, database_url: str, effects: Any = lambda: len(SENT)) -> Report:
    return check_write_tool(
        tool,
        args=fresh_account,
        edited=lambda args: {**args, "cents": 500},
        effects=effects,
        identity=ME,
        database_url=database_url,
    )


def failed(report: Report, scenario: Scenario | ReadScenario, words: str) -> None:
    result = report.result(scenario)
    assert result.outcome is Outcome.FAILED, str(report)
    assert words in result.message, result.message
    with pytest.raises(AssertionError, match=scenario.value):
        report.assert_ok()


@write_tool(side_effect="external", validate=own_account, lookup=lambda args, key: None)
def ignores_the_key(account: str, cents: int, *, request_key: str) -> dict[str, Any]:
    """Pays without passing the request key on: its lookup cannot find what it paid,
    so a re-send pays again.

    Args:
        account: The account id.
        cents: Amount in cents.
    """
    SENT.append({"account": account, "cents": cents})
    return {"status": "paid"}


def test_a_tool_that_drops_the_request_key_pays_again_on_every_retry(
    writegate_database: str,
) -> None:
    report = run(ignores_the_key, writegate_database)
    failed(report, Scenario.LOST_ANSWER_IS_UNKNOWN, "idempotency key")
    # Timeouts before applying hide it: only a lost answer shows the second payment.
    assert report.result(Scenario.RETRIES_KEEP_THE_KEY).outcome is Outcome.PASSED


@write_tool(side_effect="external", validate=own_account)
def ignores_the_key_without_lookup(account: str, cents: int, *, request_key: str) -> dict:
    """Pays without passing the request key on, and has no lookup: nothing writegate
    does shows it, until the same operation is sent a second time.

    Args:
        account: The account id.
        cents: Amount in cents.
    """
    SENT.append({"account": account, "cents": cents})
    return {"status": "paid"}


def test_a_tool_without_a_lookup_that_drops_the_request_key_is_caught(
    writegate_database: str,
) -> None:
    report = run(ignores_the_key_without_lookup, writegate_database)
    failed(report, Scenario.LOST_ANSWER_IS_UNKNOWN, "must pass request_key downstream")
    assert "one operation, one request key" in report.result(
        Scenario.LOST_ANSWER_IS_UNKNOWN).message  # fmt: skip


def idempotent(account: str, cents: int, request_key: str) -> dict[str, Any]:
    if request_key not in RECORD:
        RECORD[request_key] = {"account": account, "cents": cents}
        SENT.append(RECORD[request_key])
    return {"status": "paid", **RECORD[request_key]}


@write_tool(
    side_effect="external",
    validate=own_account,
    lookup=lambda args, key: {"status": "paid", **args},  # "yes" to any key
)
def lookup_lies(account: str, cents: int, *, request_key: str) -> dict[str, Any]:
    """Pays once per key, but its lookup says every key was paid.

    Args:
        account: The account id.
        cents: Amount in cents.
    """
    return idempotent(account, cents, request_key)


def test_a_lookup_that_claims_an_unsent_write_applied_is_caught(writegate_database: str) -> None:
    report = run(lookup_lies, writegate_database)
    failed(report, Scenario.RETRIES_KEEP_THE_KEY, "a lookup must answer None")
    assert report.result(Scenario.LOST_ANSWER_IS_UNKNOWN).outcome is Outcome.PASSED


def pays_while_validating(args: dict[str, Any], identity: Identity) -> int:
    SENT.append({"early": args["account"]})
    return own_account(args, identity)


@write_tool(side_effect="external", validate=pays_while_validating)
def acts_before_confirm(account: str, cents: int, *, request_key: str) -> dict[str, Any]:
    """Its validator already writes, so something happens before anyone confirms.

    Args:
        account: The account id.
        cents: Amount in cents.
    """
    return idempotent(account, cents, request_key)


def test_a_tool_that_writes_at_proposal_time_is_caught(writegate_database: str) -> None:
    report = run(acts_before_confirm, writegate_database)
    failed(report, Scenario.NOTHING_BEFORE_CONFIRM, "before any confirm: 1 effect(s)")


@write_tool(side_effect="external", validate=own_account, lookup=lambda a, k: RECORD.get(k))
def pays_once(account: str, cents: int, *, request_key: str) -> dict[str, Any]:
    """A well-behaved payment: once per key, and a truthful lookup.

    Args:
        account: The account id.
        cents: Amount in cents.
    """
    return idempotent(account, cents, request_key)


def test_an_effect_counter_that_sees_nothing_fails_instead_of_proving_nothing(
    writegate_database: str,
) -> None:
    report = run(pays_once, writegate_database, effects=lambda: 0)
    failed(report, Scenario.NOTHING_BEFORE_CONFIRM, "effects() counted no effect")


def test_a_writegate_that_calls_the_downstream_twice_is_caught(
    writegate_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = Executor.send

    def twice(self: Executor, spec: ToolSpec, execution: Execution) -> DownstreamResult | Any:
        real(self, spec, execution)
        return real(self, spec, execution)

    monkeypatch.setattr(Executor, "send", twice)
    report = run(pays_once, writegate_database)  # the tool dedups: only counting calls sees it
    failed(report, Scenario.CONCURRENT_CONFIRMS, "reached the tool 3 times")
    assert report.result(Scenario.STRANGER_REPLAY).outcome is Outcome.PASSED


# -- read tools ------------------------------------------------------------------------


@read_tool
def balance_for(account: str, user_id: str) -> dict[str, Any]:
    """Reads for whichever user the model names.

    Args:
        account: The account id.
        user_id: Whose account.
    """
    return {"account": account, "owner_asked": ACCOUNTS.get(account) == user_id}


def run_read(tool: Any, database_url: str, args: Any, identity: Identity = ME) -> Report:
    return check_read_tool(tool, args=args, identity=identity, database_url=database_url)


def test_a_read_tool_that_lets_the_model_name_the_user_is_caught(
    writegate_database: str,
) -> None:
    def args() -> dict[str, Any]:
        return {"account": fresh_account()["account"], "user_id": ME.user_id}

    report = run_read(balance_for, writegate_database, args)
    failed(report, ReadScenario.IDENTITY_FROM_HOST, "the model sets ['user_id']")
    for scenario in (ReadScenario.RUNS_AT_ONCE, ReadScenario.NO_WRITE_PATH):
        assert report.result(scenario).outcome is Outcome.PASSED, str(report)


def test_a_writegate_whose_reads_leave_no_audit_row_is_caught(
    writegate_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unaudited(
        self: ApprovalService,
        identity: Identity,
        tool_name: str,
        raw_args: dict[str, Any],
        *,
        thread_id: str | None = None,
    ) -> dict[str, Any]:
        spec = self.spec_for(tool_name)
        with self.store.transaction() as tx:
            return spec.read(ToolContext(identity, tx.conn, thread_id), spec.normalize(raw_args))

    monkeypatch.setattr(ApprovalService, "read", unaudited)
    # `balance` of the library tests: a well-behaved read of the caller's own account.
    report = run_read(
        balance, writegate_database, lambda: {"account": new_account()}, Identity(USER, TENANT)
    )
    failed(report, ReadScenario.AUDITED_WITH_IDENTITY, "3 calls left 0 audit rows")
    assert report.result(ReadScenario.RUNS_AT_ONCE).outcome is Outcome.PASSED


def test_the_read_check_takes_read_tools_and_the_write_check_write_tools(
    writegate_database: str,
) -> None:
    with pytest.raises(TypeError, match="check_write_tool"):
        run_read(pays_once, writegate_database, fresh_account)
    with pytest.raises(TypeError, match="read tool"):
        check_write_tool(balance, args={}, effects=lambda: 0, database_url=writegate_database)
