"""A tier that asks for a re-typed field always asks for one, for a user's own tools.

The field is the policy's `[operations.<tool>] retype` field; else what the tool
declared is at stake (`write_tool(amount=...)`: the amount as the preview shows it;
`scope=`: the count). A write with none of them is refused when proposed, naming what
to add; a policy that would ask that of every call of a tool stops `Writegate.open`.
Nothing is ever confirmed with less than its tier asks. The shipped policy carries no
operation of the demo's: a user's own `refund_order` is judged as any unlisted tool.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.types import Command

from tests.integration.library_helpers import (
    asked,
    hand_built,
    last_tool,
    refund_order,
    refunds,
    scripted,
    tool_call,
)
from writegate import Writegate, write_tool
from writegate.approval.policy import PolicyError, parse_policy

SENT: dict[str, dict[str, Any]] = {}  # the downstream's record: request key -> what it did
TENANT = "acme"


def sent(**match: Any) -> int:
    return sum(1 for entry in SENT.values() if match.items() <= entry.items())


@write_tool(side_effect="external", scope=lambda args: len(args["recipients"]))
def announce(recipients: list[str], text: str, *, request_key: str) -> dict:
    """Send one message to several recipients.

    Args:
        recipients: Who gets it.
        text: The message.
    """
    return SENT.setdefault(request_key, {"text": text})


@write_tool(side_effect="external")
def send_email(to: str, text: str, *, request_key: str) -> dict:
    """Send an email.

    Args:
        to: The address.
        text: The message.
    """
    return SENT.setdefault(request_key, {"to": to})


TOOLS = [refund_order, announce, send_email]


@pytest.fixture(scope="module")
def url(create_database: Callable[[], str]) -> str:
    return create_database()


@pytest.fixture(scope="module")
def wg(url: str) -> Iterator[Writegate]:
    with Writegate.open(url, tools=TOOLS) as gate:  # the shipped policy
        yield gate


def ask(wg: Writegate, name: str, trust: str = "normal", **args: Any) -> tuple[Any, dict, Any]:
    """The model calls `name` in a new thread; the graph, its config and what came back."""
    graph = hand_built(wg, scripted([tool_call(name, **args)], "done", "done"))
    given = {"thread_id": f"rt_{secrets.token_hex(5)}", "user_id": "u1", "tenant_id": TENANT}
    config = {"configurable": {**given, "trust": trust}}
    return graph, config, graph.invoke({"messages": [HumanMessage("go")]}, config)


def answer(graph: Any, config: dict, question: Any, retyped: str | None) -> dict[str, Any]:
    reply = {"action": "confirm", "proposal_id": question.value["proposal_id"]}
    if retyped is not None:
        reply["retyped"] = retyped
    return dict(graph.invoke(Command(resume=reply), config))


def test_a_declared_amount_is_retyped_as_the_preview_shows_it(wg: Writegate) -> None:
    ref = f"ref_{secrets.token_hex(3)}"  # ¥600.00: +1 amount, +2 external, +1 unlisted
    graph, config, out = ask(wg, "refund_order", order_ref=ref, cents=60_000, currency="CNY")
    (question,) = asked(out)
    block = question.value["preview"]["confirmation"]
    assert (block["tier"], block["retype_field"]) == ("retype", "amount")
    assert "60,000" not in block["retype_hint"] and "600" not in block["retype_hint"]
    for wrong in (None, "60000", "6.00"):
        (again,) = asked(answer(graph, config, question, wrong))
        assert again.value["error"]["code"] == "retype_mismatch"
        assert refunds(ref) == 0
    done = answer(graph, config, question, "¥600.00")
    assert last_tool(done)["status"] == "succeeded" and refunds(ref) == 1
    # Each wrong answer is audited once, though every resume replays the earlier ones.
    rows = wg.audit(TENANT, proposal_id=question.value["proposal_id"])
    assert [r.error_code for r in rows if r.status != "succeeded"].count("retype_mismatch") == 3


def test_a_declared_scope_is_retyped_as_its_count(wg: Writegate) -> None:
    text = f"hello {secrets.token_hex(3)}"
    graph, config, out = ask(wg, "announce", recipients=[f"r{i}" for i in range(12)], text=text)
    (question,) = asked(out)
    block = question.value["preview"]["confirmation"]
    assert (block["tier"], block["retype_field"]) == ("retype", "count")
    (again,) = asked(answer(graph, config, question, "11"))
    assert again.value["error"]["code"] == "retype_mismatch" and sent(text=text) == 0
    assert last_tool(answer(graph, config, question, "12"))["status"] == "succeeded"
    assert sent(text=text) == 1


def test_a_write_with_nothing_to_retype_is_refused_when_proposed(wg: Writegate) -> None:
    to = f"{secrets.token_hex(3)}@example.com"
    _, config, out = ask(wg, "send_email", trust="low", to=to, text="hi")  # score 5: retype
    assert not asked(out)
    refused = last_tool(out)
    assert (refused["code"], refused["retryable"]) == ("retype_unavailable", False)
    assert "[operations.send_email]" in refused["message"] and "amount=" in refused["message"]
    assert sent(to=to) == 0
    (row,) = wg.audit(TENANT, thread_id=config["configurable"]["thread_id"])
    assert (row.event, row.status, row.error_code) == ("propose", "rejected", "retype_unavailable")
    # The same tool where its tier asks nothing to be typed is proposed as before.
    assert asked(ask(wg, "send_email", to=to, text="hi")[2])


def test_a_users_refund_order_is_judged_as_their_own_tool(wg: Writegate) -> None:
    ref = f"ref_{secrets.token_hex(3)}"
    graph, config, out = ask(wg, "refund_order", order_ref=ref, cents=60_000, currency="CNY")
    (question,) = asked(out)
    assert "amount_minor" not in str(question.value)  # nothing of the demo's refund_order
    reasons = " ".join(question.value["preview"]["confirmation"]["reasons"])
    assert "refund_order is not listed in the policy's operations" in reasons
    done = answer(graph, config, question, "600")
    assert last_tool(done)["status"] == "succeeded" and refunds(ref) == 1


def _policy_file(tmp_path: Path, operations: str = "") -> Path:
    """Every call of an external write scores at least 3 (+1 unlisted): all retype."""
    path = tmp_path / "policy.toml"
    path.write_text(
        'version = "all-retype"\n' + operations
        + '[[tiers]]\nname = "one_click"\nmin_score = 0\n'
        '[[tiers]]\nname = "retype"\nmin_score = 3\nretype = true\n',
        encoding="utf-8",
    )  # fmt: skip
    return path


def test_a_policy_asking_every_call_for_a_retype_with_nothing_to_retype_stops_open(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WRITEGATE_POLICY_FILE", str(_policy_file(tmp_path)))
    with pytest.raises(PolicyError) as refused:
        Writegate.open(url, tools=[send_email])
    said = str(refused.value)
    assert "send_email" in said and "'retype'" in said
    assert '[operations.send_email] retype = { field = "' in said and "amount=" in said
    # Told what to re-type, or with a declared amount to fall back on, it opens.
    listed = (
        '[operations.send_email]\nsensitivity = 1\nretype = { field = "to", match = "exact" }\n'
    )
    monkeypatch.setenv("WRITEGATE_POLICY_FILE", str(_policy_file(tmp_path, listed)))
    with Writegate.open(url, tools=[send_email, refund_order]) as gate:
        (question,) = asked(ask(gate, "send_email", to="x@example.com", text="hi")[2])
        assert question.value["preview"]["confirmation"]["retype_field"] == "to"


def test_a_policy_field_the_tool_does_not_have_is_refused_when_proposed(url: str) -> None:
    policy = parse_policy(
        {
            "version": "wrong-field",
            "operations": {"send_email": {"retype": {"field": "amount_minor", "match": "number"}}},
            "tiers": [{"name": "retype", "min_score": 0, "retype": True}],
        }
    )
    with Writegate.open(url, tools=[send_email], policy=policy) as gate:
        to = f"{secrets.token_hex(3)}@example.com"
        out = ask(gate, "send_email", to=to, text="hi")[2]
        assert not asked(out)
        refused = last_tool(out)
        assert refused["code"] == "retype_unavailable" and "amount_minor" in refused["message"]
        assert sent(to=to) == 0


def test_a_retype_table_without_its_field_is_refused_at_load() -> None:
    data = {
        "version": "no-field",
        "operations": {"send_email": {"retype": {"match": "exact"}}},
        "tiers": [{"name": "one_click", "min_score": 0}],
    }
    with pytest.raises(PolicyError, match=r"\[operations.send_email\] retype.*field"):
        parse_policy(data)
