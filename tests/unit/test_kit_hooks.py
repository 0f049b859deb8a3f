"""`write_tool`'s optional steps, without a database: clarify, normalize, freeze, and a
downstream write's prepare / on_success / compensate around its call."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from writegate.approval.errors import ClarificationNeeded, StateChanged, ValidationFailed
from writegate.approval.models import Identity
from writegate.approval.spec import DownstreamResult, ToolContext, acting_for
from writegate.tools.kit import read_tool, write_tool
from writegate.tools.kit_spec import Checked, PreviewField

ME = Identity("alice", "t1")


class Books:
    """Stands in for the ledger transaction's connection: one account and its log."""

    def __init__(self, version: int = 3) -> None:
        self.version = version
        self.log: list[tuple[Any, ...]] = []


def _ask(raw: dict[str, Any]) -> dict[str, str]:
    return {} if raw.get("cents") else {"cents": "How much should be paid?"}


def _check(args: dict[str, Any], identity: Identity, *, conn: Books) -> Checked:
    return Checked(conn.version)


def _reserve(
    args: dict[str, Any], *, conn: Books, expected_version: int, request_key: str
) -> dict[str, Any]:
    conn.log.append(("reserve", args["cents"], expected_version, request_key))
    return {"reserved": args["cents"]}


def _settle(args: dict[str, Any], result: dict[str, Any], *, conn: Books, request_key: str) -> None:
    conn.log.append(("settle", result["ref"], request_key))


def _release(args: dict[str, Any], *, conn: Books, identity: Identity, request_key: str) -> None:
    conn.log.append(("release", args["cents"], identity.user_id, request_key))


SENT: list[tuple[str, int, str]] = []


@write_tool(
    side_effect="external",
    validate=_check,
    clarify=_ask,
    prepare=_reserve,
    on_success=_settle,
    compensate=_release,
    lookup=lambda args, key: None,
)
def pay(account: str, cents: int, *, request_key: str) -> dict[str, Any]:
    """Pay an amount into an account."""
    SENT.append((account, cents, request_key))
    return {"ref": f"p_{request_key}", "cents": cents}


def ctx(conn: Books) -> ToolContext:
    return ToolContext(ME, conn, "th")


def test_clarify_asks_the_user_for_what_the_model_left_out() -> None:
    with pytest.raises(ClarificationNeeded) as caught:
        pay.spec.normalize({"account": "a1", "cents": None})
    assert caught.value.details["missing"] == ["cents"]
    assert caught.value.details["questions"] == ["How much should be paid?"]
    assert "ask the user: How much should be paid?" in str(caught.value)
    assert pay.spec.normalize({"account": " a1 ", "cents": 5}) == {"account": "a1", "cents": 5}


def test_prepare_runs_in_the_confirming_transaction_before_the_call() -> None:
    books = Books(version=3)
    local = pay.spec.apply(ctx(books), {"account": "a1", "cents": 5}, expected_version=3,
                           request_key="k1")  # fmt: skip
    assert local == {"reserved": 5} and books.log == [("reserve", 5, 3, "k1")]
    assert pay.spec.has_downstream and pay.spec.has_lookup


def test_prepare_does_not_run_when_the_version_moved() -> None:
    books = Books(version=4)
    with pytest.raises(StateChanged):
        pay.spec.apply(ctx(books), {"account": "a1", "cents": 5}, expected_version=3,
                       request_key="k1")  # fmt: skip
    assert books.log == []


def test_on_success_gets_the_downstream_result_and_compensate_the_request_key() -> None:
    books, args = Books(), {"account": "a1", "cents": 5}
    with acting_for(ME):
        done = pay.spec.call_downstream(args, "k2")
    assert SENT[-1] == ("a1", 5, "k2") and done.provider_ref is None
    pay.spec.on_downstream_success(ctx(books), args, "k2", done)
    pay.spec.compensate(ctx(books), args, "k3")
    assert books.log == [("settle", "p_k2", "k2"), ("release", 5, "alice", "k3")]


def test_without_these_hooks_success_and_refusal_change_nothing_locally() -> None:
    @write_tool(side_effect="external")
    def send(to: str, *, request_key: str) -> None:
        """Send."""

    books = Books()
    assert send.spec.apply(ctx(books), {"to": "x"}, expected_version=0, request_key="k") == {}
    send.spec.on_downstream_success(ctx(books), {"to": "x"}, "k", DownstreamResult(None))
    send.spec.compensate(ctx(books), {"to": "x"}, "k")
    assert books.log == []


def test_the_bookkeeping_hooks_are_refused_on_a_local_write() -> None:
    with pytest.raises(TypeError, match="compensate="):

        @write_tool(side_effect="reversible", compensate=_release)
        def note(text: str, *, request_key: str, conn: Any) -> None:
            """Write a note."""


def _canonical(args: dict[str, Any]) -> dict[str, Any]:
    ids = args["ids"]
    if ids is not None and not ids:
        raise ValidationFailed("name at least one, or null for all")
    return {"filter": sorted(set(ids)) if ids is not None else None}


def _fix_set(args: dict[str, Any], *, conn: Books) -> dict[str, Any]:
    wanted = args["filter"] or ["b", "a"]
    return {"ids": sorted(wanted), "version_seen": conn.version}


@write_tool(side_effect="irreversible", normalize=_canonical, freeze=_fix_set)
def archive(
    ids: list[str] | None, *, request_key: str, conn: Books, confirmed_args: dict[str, Any]
) -> dict[str, Any]:
    """Archive documents: the ids named, or null for all of them."""
    conn.log.append(("archive", ids, confirmed_args["version_seen"]))
    return {"count": len(ids or ())}


def test_normalize_gives_the_canonical_arguments() -> None:
    assert archive.spec.normalize({"ids": ["c", "a", "c"]}) == {"filter": ["a", "c"]}
    assert archive.spec.normalize({"ids": None}) == {"filter": None}
    with pytest.raises(ValidationFailed, match="at least one"):
        archive.spec.normalize({"ids": []})


def test_freeze_fixes_the_set_into_the_arguments_the_function_gets() -> None:
    books = Books(version=7)
    frozen = archive.spec.freeze_scope(ctx(books), {"filter": None})
    assert frozen == {"filter": None, "ids": ["a", "b"], "version_seen": 7}
    done = archive.spec.apply(ctx(books), frozen, expected_version=0, request_key="k")
    assert done == {"count": 2} and books.log == [("archive", ["a", "b"], 7)]


def test_a_tool_without_freeze_keeps_its_arguments() -> None:
    args = {"account": "a1", "cents": 5}
    assert pay.spec.freeze_scope(ctx(Books()), args) is args


def test_a_read_tool_may_take_the_connection() -> None:
    @read_tool
    def balance(account: str, *, identity: Identity, conn: Books) -> dict[str, Any]:
        """The balance."""
        return {"account": account, "user": identity.user_id, "version": conn.version}

    assert balance.spec.read(ctx(Books(version=9)), {"account": "a1"}) == {
        "account": "a1",
        "user": "alice",
        "version": 9,
    }
    with pytest.raises(ValidationFailed, match="write step"):
        balance.spec.apply(ctx(Books()), {"account": "a1"}, expected_version=0, request_key="k")
    with pytest.raises(ValidationFailed, match="downstream"):
        balance.spec.call_downstream({"account": "a1"}, "k")


def test_a_read_tool_has_no_confirmed_arguments() -> None:
    with pytest.raises(TypeError, match="confirmed_args"):

        @read_tool
        def peek(account: str, *, confirmed_args: dict[str, Any]) -> None:
            """Peek."""


def test_an_amount_names_the_field_of_its_currency() -> None:
    shown = PreviewField("amount_minor", 525, "$5.25", label="Amount", money_of="currency")
    assert shown.to_dict() == {
        "name": "amount_minor",
        "value": 525,
        "display": "$5.25",
        "label": "Amount",
        "money_of": "currency",
    }


def test_applied_since_lists_the_downstreams_effects_by_request_key() -> None:
    since = datetime(2026, 1, 1, tzinfo=UTC)
    asked: list[datetime] = []

    @write_tool(
        side_effect="external",
        applied_since=lambda at: asked.append(at) or {"pay_listed:t:k": {"ref": "p_1"}},
    )
    def pay_listed(account: str, *, request_key: str) -> dict[str, Any]:
        """Pay."""
        return {}

    assert pay_listed.spec.has_applied_since and not pay.spec.has_applied_since
    assert pay_listed.spec.applied_downstream_since(since) == {"pay_listed:t:k": {"ref": "p_1"}}
    assert asked == [since]


def test_applied_since_must_give_each_key_the_downstreams_record() -> None:
    @write_tool(side_effect="external", applied_since=lambda at: {"k": "applied"})
    def pay_bare(account: str, *, request_key: str) -> dict[str, Any]:
        """Pay."""
        return {}

    with pytest.raises(TypeError, match="applied_since= must return a dict"):
        pay_bare.spec.applied_downstream_since(datetime(2026, 1, 1, tzinfo=UTC))
