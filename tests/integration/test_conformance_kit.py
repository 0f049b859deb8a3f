"""The conformance kit passes every shipped tool (writes and reads), and a user's own
`@write_tool`.

Each test gets its own database from the kit's `writegate_database` fixture. Effects
are counted where each tool leaves them: the payment provider simulator's refunds,
ticket rows and versions, batch items, a user tool's downstream record.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from writegate import Identity, NotFound, write_tool
from writegate.checkpoints.migrate import apply_migrations
from writegate.demo.batch import close_tickets
from writegate.demo.domain import domain_tools
from writegate.demo.faults import FaultScript
from writegate.demo.orders import get_order, list_orders
from writegate.demo.provider import SimulatedProvider
from writegate.demo.refunds import refund_order_tool
from writegate.demo.schema import DEMO
from writegate.demo.ticket_writes import create_ticket, update_ticket
from writegate.demo.tickets import get_ticket, list_tickets
from writegate.testing import (
    Fault,
    Outcome,
    ReadScenario,
    Report,
    Scenario,
    check_read_tool,
    check_write_tool,
    throwaway_database,
)

ME = Identity("user_kit", "tenant_kit")
INSERT_ORDER_SQL = """
INSERT INTO orders (order_id, tenant_id, user_id, currency, payable_minor, shipping_address)
VALUES (%s, %s, %s, 'CNY', 10000, 'kit street 1')"""
INSERT_TICKET_SQL = """
INSERT INTO tickets (ticket_id, tenant_id, user_id, title, description, status, version)
VALUES (%s, %s, %s, 'Printer jams', 'Page 2 always jams.', %s, 1)"""
CREATED_TICKETS_SQL = "SELECT count(*) FROM tickets WHERE request_key IS NOT NULL"
TICKET_CHANGES_SQL = "SELECT coalesce(sum(version - 1), 0) FROM tickets"
CLOSED_BATCHES_SQL = "SELECT count(DISTINCT batch_request_key) FROM batch_items"


@pytest.fixture(autouse=True)
def demo_tables(writegate_database: str) -> None:
    """The demo's tools keep their rows in the demo's own tables, as a user's tools keep
    theirs in the user's: the kit's database gets them, writegate's come with the kit."""
    apply_migrations(writegate_database, DEMO)


def scalar(url: str, query: str, params: tuple[Any, ...] = ()) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(query, params).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def new_order(url: str) -> str:
    order_id = f"ord_kit{secrets.token_hex(4)}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(INSERT_ORDER_SQL, (order_id, ME.tenant_id, ME.user_id))
    return order_id


def new_ticket(url: str, status: str) -> str:
    ticket_id = f"tkt_kit{secrets.token_hex(4)}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(INSERT_TICKET_SQL, (ticket_id, ME.tenant_id, ME.user_id, status))
    return ticket_id


def passed(report: Report, *skipped: Scenario) -> None:
    report.assert_ok()
    assert {r.scenario for r in report.results if r.outcome is Outcome.SKIPPED} == set(skipped)


def test_refund_order_through_the_provider_simulator_and_its_faults(
    writegate_database: str,
) -> None:
    url, script = writegate_database, FaultScript()
    provider = SimulatedProvider(url, faults=script)

    def fresh_refund() -> dict[str, Any]:
        return {"order_id": new_order(url), "amount_minor": 2500, "currency": "CNY",
                "reason": "arrived broken"}  # fmt: skip

    @contextmanager
    def provider_faults(fault: Fault) -> Iterator[None]:
        step = "timeout_after" if fault is Fault.LOSE_ANSWER else "timeout_before"
        script.reset([f"{step}*"])  # every refund call, until the context ends
        try:
            yield
        finally:
            script.reset()

    report = check_write_tool(
        refund_order_tool(provider),
        args=fresh_refund,
        edited=lambda args: {**args, "amount_minor": 1500},
        effects=provider.count_refunds,
        faults=provider_faults,
        identity=ME,
        database_url=url,
    )
    passed(report)
    assert report.result(Scenario.RETRIES_KEEP_THE_KEY).figures["downstream_calls"] == 3


def test_create_ticket(writegate_database: str) -> None:
    report = check_write_tool(
        create_ticket,
        args=lambda: {"title": f"VPN drops {secrets.token_hex(3)}", "description": "Daily."},
        edited=lambda args: {**args, "title": args["title"] + " (edited)"},
        effects=lambda: scalar(writegate_database, CREATED_TICKETS_SQL),
        identity=ME,
        database_url=writegate_database,
    )
    passed(report, Scenario.LOST_ANSWER_IS_UNKNOWN, Scenario.RETRIES_KEEP_THE_KEY)


def test_update_ticket(writegate_database: str) -> None:
    report = check_write_tool(
        update_ticket,
        args=lambda: {"ticket_id": new_ticket(writegate_database, "open"), "status": "in_progress"},
        edited=lambda args: {**args, "status": "resolved"},
        effects=lambda: scalar(writegate_database, TICKET_CHANGES_SQL),
        identity=ME,
        database_url=writegate_database,
    )
    passed(report, Scenario.LOST_ANSWER_IS_UNKNOWN, Scenario.RETRIES_KEEP_THE_KEY)


def test_close_tickets(writegate_database: str) -> None:
    def two_resolved() -> dict[str, Any]:
        return {"ticket_ids": [new_ticket(writegate_database, "resolved") for _ in range(2)]}

    report = check_write_tool(
        close_tickets,
        args=two_resolved,
        edited=lambda args: {"ticket_ids": args["ticket_ids"][:1]},
        effects=lambda: scalar(writegate_database, CLOSED_BATCHES_SQL),
        identity=ME,
        database_url=writegate_database,
    )
    passed(report, Scenario.LOST_ANSWER_IS_UNKNOWN, Scenario.RETRIES_KEEP_THE_KEY)


# -- the shipped reads: run at once, audited, for the host's identity only --------------

READS: dict[str, tuple[Any, Callable[[str], dict[str, Any]]]] = {
    "get_order": (get_order, lambda url: {"order_id": new_order(url)}),
    "list_orders": (list_orders, lambda url: {}),
    "get_ticket": (get_ticket, lambda url: {"ticket_id": new_ticket(url, "open")}),
    "list_tickets": (list_tickets, lambda url: {}),
}


@pytest.mark.parametrize("name", sorted(READS))
def test_a_shipped_read_tool(name: str, writegate_database: str) -> None:
    tool, make = READS[name]
    report = check_read_tool(
        tool, args=lambda: make(writegate_database), identity=ME, database_url=writegate_database
    )
    passed(report)
    assert [r.scenario for r in report.results] == list(ReadScenario)
    figures = {result.scenario: result.figures for result in report.results}
    assert figures[ReadScenario.RUNS_AT_ONCE] == {"tool_runs": 1, "proposals": 0}
    assert figures[ReadScenario.AUDITED_WITH_IDENTITY] == {"tool_calls": 3, "audit_rows": 3}


def test_every_shipped_tool_has_its_conformance_test_above() -> None:
    # A new shipped write needs its own test here; a new read, its entry in READS.
    checked = {
        "refund_order": test_refund_order_through_the_provider_simulator_and_its_faults,
        "create_ticket": test_create_ticket,
        "update_ticket": test_update_ticket,
        "close_tickets": test_close_tickets,
    }
    shipped = domain_tools(None)  # type: ignore[arg-type]  # no provider call is made
    assert {tool.name for tool in shipped if tool.spec.requires_approval} == set(checked)
    assert {tool.name for tool in shipped if not tool.spec.requires_approval} == set(READS)


# -- a user's own tool, declared with the public API only ------------------------------

TRANSFERS: dict[str, dict[str, Any]] = {}  # the downstream's record, by idempotency key
ACCOUNTS: dict[str, str] = {}  # account -> owner


def own_account(args: dict[str, Any], identity: Identity) -> int:
    if ACCOUNTS.get(args["account"]) != identity.user_id:
        raise NotFound("no such account for this user", account=args["account"])
    return 1


def transfer_into(account: str, cents: int, request_key: str) -> dict[str, Any]:
    """The downstream: applies a key once, answers the first result for a repeat."""
    TRANSFERS.setdefault(request_key, {"account": account, "cents": cents})
    return {"status": "sent", **TRANSFERS[request_key]}


@write_tool(
    side_effect="external",
    resource=lambda args: f"account:{args['account']}",
    validate=own_account,
    lookup=lambda args, key: TRANSFERS.get(key),
)
def transfer(account: str, cents: int, *, request_key: str) -> dict[str, Any]:
    """Transfer an amount into one of the user's accounts.

    Args:
        account: The account id.
        cents: Amount in cents.
    """
    return transfer_into(account, cents, request_key)


@write_tool(side_effect="external", validate=own_account, name="transfer_without_lookup")
def transfer_without_lookup(account: str, cents: int, *, request_key: str) -> dict[str, Any]:
    """The same transfer, declared without a lookup.

    Args:
        account: The account id.
        cents: Amount in cents.
    """
    return transfer_into(account, cents, request_key)


@write_tool(
    side_effect="external", validate=own_account, dedupes_by_key=True, name="transfer_deduped"
)
def transfer_deduped(account: str, cents: int, *, request_key: str) -> dict[str, Any]:
    """The same transfer, without a lookup, to a downstream that drops a repeated key.

    Args:
        account: The account id.
        cents: Amount in cents.
    """
    return transfer_into(account, cents, request_key)


def fresh_account() -> dict[str, Any]:
    account = f"acct_{secrets.token_hex(4)}"
    ACCOUNTS[account] = ME.user_id
    return {"account": account, "cents": 1250}


def check_transfer(tool: Any, database_url: str) -> Report:
    report = check_write_tool(
        tool,
        args=fresh_account,
        edited=lambda args: {**args, "cents": 900},
        effects=lambda: len(TRANSFERS),
        identity=ME,
        database_url=database_url,
    )
    passed(report)
    return report


@pytest.mark.parametrize("tool", [transfer, transfer_without_lookup], ids=lambda t: t.name)
def test_a_user_write_tool(tool: Any, writegate_database: str) -> None:
    report = check_transfer(tool, writegate_database)
    settled = report.result(Scenario.LOST_ANSWER_IS_UNKNOWN).figures["settled"]
    assert settled == ("succeeded" if tool is transfer else "escalated")


def test_a_tool_that_dedupes_by_key_without_a_lookup_is_sent_again_and_conforms(
    writegate_database: str,
) -> None:
    """The reconciler sends it again with the same key, by design: the downstream drops
    the repeat, so the kit expects a settled write and one effect, not an escalation."""
    report = check_transfer(transfer_deduped, writegate_database)
    lost = report.result(Scenario.LOST_ANSWER_IS_UNKNOWN).figures
    assert lost["settled"] == "succeeded" and lost["effects"] == 1
    assert lost["downstream_calls"] == 3  # the executor sent it again too: same key, once
    again = report.result(Scenario.RETRIES_KEEP_THE_KEY).figures
    assert again["reconciler_resends"] == 1 and again["reconciler_lookups"] == 0


@write_tool(
    side_effect="external",
    resource=lambda args: f"account:{args['account']}",
    validate=own_account,
    lookup=lambda args, key: TRANSFERS.get(key),
    amount=lambda args: (args["cents"], "EUR"),
    name="transfer_declared",
)
def transfer_declared(account: str, cents: int, *, request_key: str) -> dict[str, Any]:
    """The same transfer, declaring its amount: EUR 70.00 is a retype tier's.

    Args:
        account: The account id.
        cents: Amount in euro cents.
    """
    return transfer_into(account, cents, request_key)


def test_a_tool_whose_tier_retypes_its_declared_amount(writegate_database: str) -> None:
    """The kit types the amount as the preview shows it, as a careful person would."""
    report = check_write_tool(
        transfer_declared,
        args=lambda: {**fresh_account(), "cents": 7000},  # +1 amount, +2 external, +1
        edited=lambda args: {**args, "cents": 6900},
        effects=lambda: len(TRANSFERS),
        identity=ME,
        database_url=writegate_database,
        scenarios=[Scenario.NOTHING_BEFORE_CONFIRM, Scenario.EDIT_SUPERSEDES],
    )
    passed(report)


def test_each_figure_names_what_it_counts(writegate_database: str) -> None:
    report = check_transfer(transfer, writegate_database)
    figures = {result.scenario: result.figures for result in report.results}
    assert figures[Scenario.NOTHING_BEFORE_CONFIRM] == {"effects": 1, "interrupts": 1}
    # 16 racing confirms: one receipt, one effect; the tool's step in the confirming
    # transaction (its validate) ran once, its function (the downstream call) once
    assert figures[Scenario.CONCURRENT_CONFIRMS] == {
        "confirms": 16,
        "receipts": 1,
        "effects": 1,
        "in_transaction": 1,
        "downstream_calls": 1,
        "lookups": 0,
        "request_keys": 1,
    }
    assert figures[Scenario.STRANGER_REPLAY] == {
        "stranger_refusals": 12,
        "owner_replay_refused_as": "already_consumed",
        "effects": 1,
    }
    assert figures[Scenario.EDIT_SUPERSEDES] == {"superseded_refusals": 2, "effects": 1}
    # the answer lost after the call applied: never sent again (it may have applied)
    assert figures[Scenario.LOST_ANSWER_IS_UNKNOWN] == {
        "downstream_calls": 1,
        "effects": 1,
        "settled": "succeeded",
        "request_keys": 1,
    }
    # the call timed out before applying: not sent again blindly; the reconciler's lookup
    # says "never seen", and it sends it once more, with the same key
    assert figures[Scenario.RETRIES_KEEP_THE_KEY] == {
        "downstream_calls": 1,
        "reconciler_lookups": 1,
        "reconciler_resends": 1,
        "request_keys": 1,
    }


DATABASES_SQL = "SELECT datname FROM pg_database"


def test_the_throwaway_database_exists_while_used_and_is_dropped_after(
    test_server_url: str,
) -> None:
    def names() -> set[str]:
        with psycopg.connect(test_server_url, autocommit=True) as conn:
            return {row[0] for row in conn.execute(DATABASES_SQL)}

    with throwaway_database(test_server_url) as url:
        name = str(conninfo_to_dict(url)["dbname"])  # a unix socket's URL ends ?host=/...
        assert name.startswith("writegate_kit_") and name in names()
        holder = psycopg.connect(url)  # left open: the drop must still go through
    assert name not in names()
    with pytest.raises(psycopg.OperationalError):
        holder.execute("SELECT 1")
