"""A user's own tool says what is at stake and how long its question waits, through
`write_tool` only: a declared amount or scope moves the tier under the shipped policy,
and a declared expiry is when its proposals expire, on the database's clock."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from langchain_core.messages import HumanMessage
from langgraph.types import Command

from tests.integration.library_helpers import asked, hand_built, last_tool, scripted, tool_call
from writegate import Writegate, write_tool
from writegate.approval.policy import load_policy, parse_policy

SENT: dict[str, dict[str, Any]] = {}  # the downstream's record: request key -> what it did


@write_tool(
    side_effect="external",
    resource=lambda args: f"customer:{args['customer']}",
    amount=lambda args: (args["total_cents"], args["currency"]),
)
def send_invoice(customer: str, total_cents: int, currency: str, *, request_key: str) -> dict:
    """Send an invoice to a customer.

    Args:
        customer: The customer id.
        total_cents: The invoice total in cents.
        currency: ISO currency code, e.g. EUR.
    """
    return SENT.setdefault(request_key, {"customer": customer, "total_cents": total_cents})


@write_tool(side_effect="external", scope=lambda args: len(args["recipients"]))
def announce(recipients: list[str], text: str, *, request_key: str) -> dict:
    """Send one message to several recipients.

    Args:
        recipients: Who gets it.
        text: The message.
    """
    return SENT.setdefault(request_key, {"recipients": len(recipients)})


@write_tool(side_effect="reversible", expires_in=timedelta(hours=2))
def hold_seat(seat: str, *, request_key: str) -> dict:
    """Hold a seat.

    Args:
        seat: The seat, e.g. 12A.
    """
    return SENT.setdefault(request_key, {"seat": seat})


@write_tool(side_effect="reversible", expires_in=timedelta(seconds=1))
def hold_seat_briefly(seat: str, *, request_key: str) -> dict:
    """Hold a seat for a moment.

    Args:
        seat: The seat, e.g. 12A.
    """
    return SENT.setdefault(request_key, {"seat": seat})


@write_tool(side_effect="reversible")
def note(text: str, *, request_key: str) -> dict:
    """Write a note.

    Args:
        text: The note.
    """
    return SENT.setdefault(request_key, {"text": text})


TOOLS = [send_invoice, announce, hold_seat, hold_seat_briefly, note]


@pytest.fixture(scope="module")
def wg(create_database: Callable[[], str]) -> Iterator[Writegate]:
    with Writegate.open(create_database(), tools=TOOLS) as gate:
        yield gate


def config() -> dict[str, Any]:
    thread = f"risk_{secrets.token_hex(5)}"
    return {"configurable": {"thread_id": thread, "user_id": "u1", "tenant_id": "acme"}}


def ask(wg: Writegate, name: str, **args: Any) -> tuple[Any, dict[str, Any], Any]:
    """The model calls `name`; the tool node asks; the graph, its config, the question."""
    graph, cfg = hand_built(wg, scripted([tool_call(name, **args)], "done")), config()
    (question,) = asked(graph.invoke({"messages": [HumanMessage("go")]}, cfg))
    return graph, cfg, question


def tier(wg: Writegate, name: str, **args: Any) -> str:
    confirmation = ask(wg, name, **args)[2].value["preview"]["confirmation"]
    return str(confirmation["tier"])


def test_a_declared_amount_raises_the_tier_of_a_users_tool(wg: Writegate) -> None:
    assert tier(wg, "send_invoice", customer="c1", total_cents=100, currency="EUR") == ("one_click")
    million = ask(wg, "send_invoice", customer="c1", total_cents=100_000_000, currency="EUR")
    confirmation = million[2].value["preview"]["confirmation"]
    shipped = load_policy().risk
    assert shipped is not None
    strongest = shipped.tiers[-1]
    assert confirmation["tier"] == strongest.name  # EUR 1,000,000: the shipped top band
    assert confirmation["second_approver"] is True
    assert "amount EUR 1,000,000.00 (+5)" in confirmation["reasons"]  # as a person reads it


def test_a_declared_scope_is_scored_like_a_batch(wg: Writegate) -> None:
    assert tier(wg, "announce", recipients=["a", "b", "c"], text="hi") == "one_click"
    many = [f"r{i}" for i in range(60)]
    assert tier(wg, "announce", recipients=many, text="hi") == "second_approver"


def test_an_operation_the_policy_does_not_list_says_so_in_its_reason(wg: Writegate) -> None:
    reasons = ask(wg, "note", text="x")[2].value["preview"]["confirmation"]["reasons"]
    assert "note is not listed in the policy's operations: counted as sensitive (+1)" in reasons


def _lifetime(wg: Writegate, proposal_id: str) -> timedelta:
    with psycopg.connect(wg.runtime.url) as conn:
        row = conn.execute(
            "SELECT expires_at - created_at FROM writegate.proposals WHERE proposal_id = %s",
            (proposal_id,),
        ).fetchone()
    assert row is not None
    lifetime: timedelta = row[0]
    return lifetime


def test_a_tools_own_expiry_is_the_lifetime_of_its_proposals_and_the_question_says_it(
    wg: Writegate,
) -> None:
    question = ask(wg, "hold_seat", seat="12A")[2].value
    assert _lifetime(wg, question["proposal_id"]) == timedelta(hours=2)
    assert question["expires_after"] == "2 hours"
    assert question["preview"]["confirmation"]["proposal_ttl_seconds"] == 7200
    assert "2 hours after it was proposed" in question["action_requests"][0]["description"]
    default = ask(wg, "note", text="x")[2].value
    assert _lifetime(wg, default["proposal_id"]) == timedelta(minutes=15)
    assert default["expires_after"] == "15 minutes"


def test_the_policy_sets_an_operations_expiry_over_the_tools(
    create_database: Callable[[], str],
) -> None:
    policy = parse_policy(
        {
            "version": "expiry-test",
            "operations": {"hold_seat": {"proposal_ttl_seconds": 600}},
            "tiers": [{"name": "one_click", "min_score": 0}],
        }
    )
    with Writegate.open(create_database(), tools=TOOLS, policy=policy) as gate:
        question = ask(gate, "hold_seat", seat="3C")[2].value
        assert _lifetime(gate, question["proposal_id"]) == timedelta(minutes=10)
        assert question["expires_after"] == "10 minutes"


def test_a_proposal_past_its_tools_expiry_on_the_database_clock_runs_nothing(
    wg: Writegate,
) -> None:
    graph, cfg, question = ask(wg, "hold_seat_briefly", seat="1A")
    proposal_id = question.value["proposal_id"]
    deadline = time.monotonic() + 5
    with psycopg.connect(wg.runtime.url, autocommit=True) as conn:
        while True:  # wait for the database's clock, not ours
            row = conn.execute(
                "SELECT now() >= expires_at FROM writegate.proposals WHERE proposal_id = %s",
                (proposal_id,),
            ).fetchone()
            if row and row[0]:
                break
            assert time.monotonic() < deadline, "the proposal never expired"
    answer = {"action": "confirm", "proposal_id": proposal_id}
    out = graph.invoke(Command(resume=answer), cfg)
    assert last_tool(out)["code"] == "proposal_expired"
    assert not [entry for entry in SENT.values() if entry.get("seat") == "1A"]


def test_a_declared_amount_is_shown_and_retyped_as_a_person_reads_it(wg: Writegate) -> None:
    graph, cfg, question = ask(
        wg, "send_invoice", customer="c1", total_cents=100_000_000, currency="EUR"
    )
    fields = {f["name"]: f for f in question.value["preview"]["fields"]}
    assert fields["total_cents"]["value"] == 100_000_000  # the machine value stays exact
    assert fields["total_cents"]["display"] == "EUR 1,000,000.00"
    confirmation = question.value["preview"]["confirmation"]
    assert "amount EUR 1,000,000.00 (+5)" in confirmation["reasons"]
    answer = {"action": "confirm", "proposal_id": question.value["proposal_id"]}
    (refused,) = asked(graph.invoke(Command(resume={**answer, "retyped": "100000000"}), cfg))
    assert refused.value["error"]["code"] == "retype_mismatch"  # not what the preview showed
    (waiting,) = asked(graph.invoke(Command(resume={**answer, "retyped": "EUR 1,000,000.00"}), cfg))
    assert waiting.value["awaiting"]["what"] == "second_approval"  # accepted as shown


def test_a_currency_without_minor_units_is_shown_whole(wg: Writegate) -> None:
    question = ask(wg, "send_invoice", customer="c1", total_cents=150_000_000, currency="JPY")[2]
    fields = {f["name"]: f for f in question.value["preview"]["fields"]}
    assert fields["total_cents"]["display"] == "JPY 150,000,000"  # JPY has no minor unit
