"""The one rule for a turn's tool calls that the tool node and the middleware share."""

from __future__ import annotations

from writegate.graph.turn import SHARED_ID, turn_refusal, turn_refusals


def _call(call_id: str, name: str, **args: object) -> dict[str, object]:
    return {"id": call_id, "name": name, "args": args}


def _is_write(name: str) -> bool:
    return name != "balance"


def test_calls_sharing_an_id_are_both_refused_and_twin_writes_only_after_the_first() -> None:
    calls = [
        _call("a", "pay", account="x", cents=1),
        _call("b", "pay", cents=1, account="x"),  # the same write, keys in another order
        _call("c", "pay", account="y", cents=1),
        _call("d", "balance", account="x"),
        _call("e", "balance", account="x"),  # the same read twice is fine
        _call("f", "pay", account="z", cents=2),
        _call("f", "balance", account="z"),
    ]
    assert turn_refusals(calls, _is_write) == {"b": "a", "f": SHARED_ID}


def test_the_refusals_say_why_and_name_the_first_call() -> None:
    twin = turn_refusal(_call("b", "pay"), "a")
    assert (twin.code, twin.details["duplicate_of"]) == ("validation_failed", "a")
    shared = turn_refusal(_call("f", "pay"), SHARED_ID)
    assert shared.code == "validation_failed" and "share this id" in shared.message
