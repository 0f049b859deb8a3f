"""Risk, tiers, re-typed fields, second approval and revocation on the in-memory store."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.fakes.memory_ledger import MemoryLedgerStore
from tests.unit.fake_tool import AddTool, Counters, Tools
from writegate.approval import errors
from writegate.approval.decisions import Confirm, parse_decision
from writegate.approval.execution import Executor, RetryPolicy
from writegate.approval.models import Identity, ProposalStatus
from writegate.approval.policy import (
    POLICY_FILE_ENV,
    Policy,
    PolicyError,
    load_policy,
    parse_policy,
)
from writegate.approval.risk import assess, check_retyped, requires_fresh_confirmation
from writegate.approval.service import ApprovalService, Confirmation
from writegate.demo.policy import DEMO_POLICY_FILE, demo_policy

T0 = datetime(2026, 9, 1, 6, 20, tzinfo=UTC)
ALICE = Identity("alice", "t1")
BOB_APPROVER = Identity("bob", "t1", frozenset({"approver"}))


def rules_policy(version: str = "p1", *, retype_at: int = 4, second_at: int = 6) -> Policy:
    """A small policy: the fake `add` tool scores 3 + its `amount` band."""
    return parse_policy(
        {
            "version": version,
            "token_ttl_seconds": 300,
            "points": {"irreversible": 1, "external": 1},
            "trust": {"high": -1, "normal": 0, "low": 2},
            "count_bands": [[10, 1], [50, 3]],
            "operations": {
                "add": {"sensitivity": 1, "retype": {"field": "amount", "match": "number"}}
            },
            "tiers": [
                {"name": "one_click", "min_score": 0},
                {"name": "retype", "min_score": retype_at, "retype": True},
                {
                    "name": "second_approver",
                    "min_score": second_at,
                    "retype": True,
                    "second_approver": True,
                    "token_ttl_seconds": 60,
                },
            ],
        }
    )


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def world():
    clock, db = Clock(), Counters()
    store = MemoryLedgerStore(clock=clock, conn=db)
    service = ApprovalService(store, Tools(AddTool()), rules_policy())
    executor = Executor(service, retry=RetryPolicy(base_delay=0), sleep=lambda s: None)
    return clock, db, service, executor


def stricter(service, version="p1", **tiers):
    """The same store and tools under other tier thresholds; its own executor."""
    other = ApprovalService(service.store, service.tools, rules_policy(version, **tiers))
    return other, Executor(other, retry=RetryPolicy(base_delay=0), sleep=lambda s: None)


def propose(service, who=ALICE, amount=5, call="call_1"):
    return service.propose(
        who,
        thread_id="th1",
        tool_call_id=call,
        tool_name="add",
        raw_args={"counter_id": "c1", "amount": amount},
    )


def confirm(service, proposal, retyped=None, who=ALICE):
    decision = Confirm(action="confirm", proposal_id=proposal.proposal_id, retyped=retyped)
    return service.decide(who, decision)


# -- the risk function and the policy file ---------------------------------------------


def test_every_point_has_a_reason_and_trust_moves_the_tier():
    rules = rules_policy().risk
    base = {"operation": "add", "irreversible": True, "external": True, "trust": None}
    normal = assess(rules, base)
    assert (normal.score, normal.tier.name) == (3, "one_click")
    assert normal.reasons[:3] == (
        "cannot be undone (+1)",
        "money or messages leave the system (+1)",
        "sensitive operation add (+1)",
    )
    assert assess(rules, {**base, "trust": "low"}).tier.name == "retype"
    assert assess(rules, {**base, "trust": "high"}).score == 2
    # a trust level the policy does not know counts as the least trusted one
    assert assess(rules, {**base, "trust": "hacker"}).score == 5
    many = assess(rules, {**base, "count": 50})
    assert (many.score, many.tier.name) == (6, "second_approver")
    assert "50 items at once (+3)" in many.reasons


def test_the_shipped_policy_carries_no_operation_of_an_application(
    monkeypatch: pytest.MonkeyPatch,
):
    """A user's own `refund_order` must not inherit the demo's rules (its retype field)."""
    monkeypatch.delenv(POLICY_FILE_ENV, raising=False)
    rules = load_policy().risk
    assert rules is not None and rules.operations == {}
    assert rules.operation("refund_order").retype_field is None


def test_the_demo_reads_its_own_policy_unless_one_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.delenv(POLICY_FILE_ENV, raising=False)
    rules = demo_policy().risk
    assert rules is not None
    fields = {name: rules.operation(name).retype_field for name in rules.operations}
    assert fields == {"refund_order": "amount_minor", "update_ticket": "ticket_id",
                      "create_ticket": "title", "close_tickets": "count"}  # fmt: skip
    assert demo_policy().version == load_policy(DEMO_POLICY_FILE).version
    named = write_policy(tmp_path / "named.toml")
    monkeypatch.setenv(POLICY_FILE_ENV, str(named))
    assert demo_policy().version == load_policy(named).version  # the operator's word wins


def test_the_demo_policy_puts_refunds_in_tiers_by_amount():
    policy = demo_policy()
    refund = {"operation": "refund_order", "currency": "CNY", "irreversible": True,
              "external": True, "trust": None}  # fmt: skip
    tiers = {
        amount: assess(policy.risk, {**refund, "amount_minor": amount}).tier.name
        for amount in (19900, 50000, 500000, 5000000)
    }
    assert tiers == {19900: "one_click", 50000: "retype", 500000: "second_approver",
                     5000000: "second_approver_short"}  # fmt: skip
    short = policy.risk.tier_named("second_approver_short")
    assert short is not None and short.token_ttl == timedelta(seconds=60)


def test_policy_file_from_the_environment_and_broken_files_refuse_to_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    good = tmp_path / "policy.toml"
    good.write_text(
        'version = "local-7"\n[[tiers]]\nname = "one_click"\nmin_score = 0\n', encoding="utf-8"
    )
    monkeypatch.setenv(POLICY_FILE_ENV, str(good))
    assert load_policy().version.startswith("local-7+")  # the declared version, then a digest
    (tmp_path / "bad.toml").write_text('version = "x"\ntiers = []\n', encoding="utf-8")
    with pytest.raises(PolicyError):
        load_policy(tmp_path / "bad.toml")
    with pytest.raises(PolicyError):
        load_policy(tmp_path / "missing.toml")


def test_policy_load_reads_the_path_else_the_environment_else_the_default_else_the_shipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    mine, named = write_policy(tmp_path / "mine.toml"), tmp_path / "named.toml"
    named.write_text('version = "named-1"\n[[tiers]]\nname = "one_click"\nmin_score = 0\n',
                     encoding="utf-8")  # fmt: skip
    monkeypatch.delenv(POLICY_FILE_ENV, raising=False)
    assert Policy.load().version == load_policy().version  # the shipped file
    assert Policy.load(default=mine).version == load_policy(mine).version
    monkeypatch.setenv(POLICY_FILE_ENV, str(named))
    assert Policy.load(default=mine).version.startswith("named-1+")  # the operator's word
    assert Policy.load(mine, default=named).version == load_policy(mine).version
    with pytest.raises(PolicyError):
        Policy.load(tmp_path / "missing.toml")


def test_the_demo_policy_scores_batch_size():
    policy = demo_policy()
    close = {"operation": "close_tickets", "irreversible": True, "external": False,
             "trust": None}  # fmt: skip
    tiers = {n: assess(policy.risk, {**close, "count": n}).tier.name for n in (3, 50, 200)}
    assert tiers == {3: "one_click", 50: "retype", 200: "second_approver"}
    assert "200 items at once (+5)" in assess(policy.risk, {**close, "count": 200}).reasons


SMALL_POLICY = """
version = "local-1"
{top}
[points]
irreversible = 1
{points}
[operations.add]
sensitivity = 1
retype = {{ field = "amount", match = "number" }}

[[tiers]]
name = "one_click"
min_score = 0

[[tiers]]
name = "retype"
min_score = {retype_at}
retype = true
{tier}
"""


def write_policy(path: Path, *, retype_at: int = 4, top: str = "", points: str = "",
                 tier: str = "", comment: str = "") -> Path:  # fmt: skip
    text = SMALL_POLICY.format(retype_at=retype_at, top=top, points=points, tier=tier)
    path.write_text(comment + text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("where", "text", "table", "key"),
    [
        ("points", 'default_trust = "normal"', "[points]", "default_trust"),
        ("top", "tokn_ttl_seconds = 300", "top level", "tokn_ttl_seconds"),
        ("tier", "second_aprover = true", "[[tiers]] #2", "second_aprover"),
        ("top", "[amount_bands]\ncount_bands = [[10, 1]]", "[amount_bands]", "count_bands"),
    ],
    ids=["misplaced-in-points", "typo-at-top", "typo-in-a-tier", "count-bands-as-a-currency"],
)
def test_an_unknown_or_misplaced_key_refuses_to_load_naming_file_table_and_key(
    tmp_path: Path, where: str, text: str, table: str, key: str
):
    path = write_policy(tmp_path / "policy.toml", **{where: text})
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    message = str(caught.value)
    assert "\n" not in message
    assert str(path) in message and table in message and key in message


def test_a_changed_file_under_an_unchanged_version_is_another_policy(tmp_path: Path, world):
    _, db, service, _ = world
    old_file = write_policy(tmp_path / "old.toml")
    old = load_policy(old_file)
    base = ApprovalService(service.store, service.tools, old)
    c = confirm(base, propose(base))  # score 3: one click under the old rules
    assert c.proposal.preview["confirmation"]["tier"] == "one_click"
    # The same `version` string, stricter rules: a re-type from score 3.
    stricter_file = write_policy(tmp_path / "new.toml", retype_at=3)
    tighter = ApprovalService(service.store, service.tools, load_policy(stricter_file))
    with pytest.raises(errors.PolicyChanged):  # re-judged, though `version` is the same
        Executor(tighter).execute(ALICE, c.token)
    assert db.values["c1"] == 0
    assert tighter.policy.version != old.version
    assert tighter.policy.version.startswith("local-1+")
    # Only a comment changed: the same policy, the approval executes.
    reworded = load_policy(write_policy(tmp_path / "same.toml", comment="# reworded\n"))
    assert reworded.version == old.version
    same = ApprovalService(service.store, service.tools, reworded)
    assert Executor(same).execute(ALICE, c.token).status == "succeeded"
    assert db.values["c1"] == 5


# -- re-typed key fields ---------------------------------------------------------------


def test_the_preview_says_the_tier_and_keeps_every_argument(world):
    _, _, service, _ = world
    p = propose(stricter(service, retype_at=3)[0], amount=10)
    block = p.preview["confirmation"]
    assert block["tier"] == "retype" and block["retype_field"] == "amount"
    assert block["reasons"][-1] == "score 3: tier retype"
    assert {f["name"] for f in p.preview["fields"]} == {"counter_id", "amount"}
    assert p.tier == "retype" and p.risk["inputs"]["operation"] == "add"


@pytest.mark.parametrize("typed", ["", None, "1", "10 10", "100", "ten"])
def test_a_wrong_or_missing_retype_confirms_nothing(world, typed):
    service, _ = stricter(world[2], retype_at=3)
    p = propose(service, amount=10)
    with pytest.raises(errors.RetypeMismatch) as caught:
        confirm(service, p, retyped=typed)
    assert "10" not in caught.value.message  # the error never gives the answer away
    assert service.get_proposal(ALICE, p.proposal_id).status is ProposalStatus.AWAITING


@pytest.mark.parametrize("typed", ["10", "10.00", " 10 "])
def test_the_right_retype_confirms_and_executes(world, typed):
    db = world[1]
    service, executor = stricter(world[2], retype_at=3)
    p = propose(service, amount=10)
    c = confirm(service, p, retyped=typed)
    assert isinstance(c, Confirmation)
    assert executor.execute(ALICE, c.token).status == "succeeded" and db.values["c1"] == 10


def test_retype_of_last_four_characters():
    p = replace(
        _proposal_stub(),
        args={"order_id": "ord_1001"},
        preview={"fields": [{"name": "order_id", "value": "ord_1001", "display": "ord_1001"}]},
        risk={"retype": {"field": "order_id", "match": "last4"}},
    )
    check_retyped(p, "1001")
    check_retyped(p, "ORD_1001")
    with pytest.raises(errors.RetypeMismatch):
        check_retyped(p, "0011")


def _proposal_stub():
    service = ApprovalService(MemoryLedgerStore(conn=Counters()), Tools(AddTool()), Policy())
    return propose(service)


def test_retyped_travels_in_the_structured_and_the_hitl_shapes():
    plain = parse_decision(
        {"action": "confirm", "proposal_id": "p1", "retyped": "¥500.00"},
        asked_proposal_id="p1",
        presented=lambda: True,
    )
    hitl = parse_decision(
        {"decisions": [{"type": "approve", "retyped": "¥500.00"}]},
        asked_proposal_id="p1",
        presented=lambda: True,
    )
    assert plain == hitl and isinstance(plain, Confirm) and plain.retyped == "¥500.00"


# -- second approver -------------------------------------------------------------------


def test_second_approver_flow_issues_the_token_to_the_requester_only(world):
    clock, db, service, _ = world
    big, _ = stricter(service, retype_at=2, second_at=3)
    p = propose(big, amount=100, call="call_2")
    waiting = confirm(big, p, retyped="100")
    assert waiting.status is ProposalStatus.AWAITING_SECOND
    assert confirm(big, p).status is ProposalStatus.AWAITING_SECOND  # still no token
    with service.store.transaction() as tx:
        assert tx.get_token_for_proposal(p.proposal_id) is None
    approved = big.approve_as_second(BOB_APPROVER, p.proposal_id)
    assert approved.status is ProposalStatus.CONFIRMED and approved.second_approver == "bob"
    assert big.approve_as_second(BOB_APPROVER, p.proposal_id).second_approver == "bob"
    c = confirm(big, p)
    assert isinstance(c, Confirmation) and c.expires_at == clock.now + timedelta(seconds=60)
    with pytest.raises(errors.SubjectMismatch):  # bound to the requester, not the approver
        Executor(big).execute(BOB_APPROVER, c.token)
    assert Executor(big).execute(ALICE, c.token).status == "succeeded" and db.values["c1"] == 100


@pytest.mark.parametrize(
    ("who", "error"),
    [
        (Identity("alice", "t1", frozenset({"approver"})), errors.SelfApproval),
        (Identity("carol", "t2", frozenset({"approver"})), errors.NotFound),
        (Identity("dave", "t1"), errors.Forbidden),
    ],
    ids=["self-approval", "other-tenant", "no-approver-role"],
)
def test_second_approval_refusals_change_nothing(world, who, error):
    _, _, service, _ = world
    big, _ = stricter(service, retype_at=2, second_at=3)
    p = propose(big)
    confirm(big, p, retyped="5")
    with pytest.raises(error):
        big.approve_as_second(who, p.proposal_id)
    assert big.get_proposal(ALICE, p.proposal_id).status is ProposalStatus.AWAITING_SECOND


def test_an_approver_cannot_approve_before_the_requester_confirmed(world):
    _, _, service, _ = world
    big, _ = stricter(service, retype_at=2, second_at=3)
    p = propose(big)
    with pytest.raises(errors.ProposalNotPending):
        big.approve_as_second(BOB_APPROVER, p.proposal_id)


def test_a_declining_approver_ends_the_request(world):
    _, _, service, _ = world
    big, _ = stricter(service, retype_at=2, second_at=3)
    p = propose(big)
    confirm(big, p, retyped="5")
    assert big.decline_as_second(BOB_APPROVER, p.proposal_id).status is ProposalStatus.DECLINED
    with pytest.raises(errors.ProposalNotPending):
        confirm(big, p)


# -- policy versions and revocation ----------------------------------------------------


def test_a_policy_change_refuses_only_what_it_would_treat_differently(world):
    _, db, service, _ = world
    c = confirm(service, propose(service))  # score 3: one click under p1
    same = ApprovalService(service.store, service.tools, rules_policy("p2"))
    assert Executor(same).execute(ALICE, c.token).status == "succeeded"
    c2 = confirm(service, propose(service, call="call_2"))
    tighter, tighter_executor = stricter(service, "p3", retype_at=3)
    assert requires_fresh_confirmation(c2.proposal, "p1", tighter.policy)
    with pytest.raises(errors.PolicyChanged):
        tighter_executor.execute(ALICE, c2.token)
    legacy = ApprovalService(service.store, service.tools, Policy(version="p4"))
    with pytest.raises(errors.PolicyChanged):  # no rules: nothing proves it agrees
        Executor(legacy).execute(ALICE, c2.token)
    assert db.values["c1"] == 5


def test_a_proposal_made_under_another_tier_cannot_be_confirmed(world):
    _, _, service, _ = world
    p = propose(service)
    with pytest.raises(errors.PolicyChanged):
        confirm(stricter(service, "p3", retype_at=3)[0], p)


def test_revocation_before_execution_is_refused_as_revoked(world):
    _, db, service, executor = world
    c = confirm(service, propose(service))
    with pytest.raises(errors.NotFound):  # neither approver nor requester
        service.revoke(Identity("eve", "t1"), c.proposal.proposal_id)
    revoked = service.revoke(BOB_APPROVER, c.proposal.proposal_id)
    assert revoked.status is ProposalStatus.REVOKED and revoked.revoked_by == "bob"
    with pytest.raises(errors.Revoked):
        executor.execute(ALICE, c.token)
    assert db.values["c1"] == 0


def test_revocation_after_execution_says_it_is_too_late(world):
    _, db, service, executor = world
    c = confirm(service, propose(service))
    executor.execute(ALICE, c.token)
    with pytest.raises(errors.RevokeTooLate) as caught:
        service.revoke(ALICE, c.proposal.proposal_id)
    assert caught.value.details["execution_state"] == "succeeded"
    assert db.values["c1"] == 5


def test_an_operation_the_policy_does_not_list_is_counted_as_sensitive_and_says_why():
    rules = rules_policy().risk
    unlisted = assess(rules, {"operation": "wire", "irreversible": False, "trust": None})
    assert unlisted.reasons[0] == (
        "wire is not listed in the policy's operations: counted as sensitive (+1)"
    )
    listed = assess(rules, {"operation": "add", "irreversible": False, "trust": None})
    assert listed.reasons[0] == "sensitive operation add (+1)"


def test_a_declared_amount_scores_its_size_whichever_way_the_money_moves():
    rules = load_policy().risk
    base = {"operation": "credit_note", "currency": "EUR", "trust": None}
    charge = assess(rules, {**base, "amount_minor": 100_000_000})
    credit = assess(rules, {**base, "amount_minor": -100_000_000})
    assert charge.score == credit.score == 6  # +5 for the amount, +1 unlisted


def test_the_most_specific_expiry_wins():
    def policy(operation_ttl=None, tier_ttl=None):
        tier = {"name": "one_click", "min_score": 0}
        data = {"version": "ttl", "proposal_ttl_seconds": 900, "tiers": [tier]}
        if tier_ttl:
            tier["proposal_ttl_seconds"] = tier_ttl
        if operation_ttl:
            data["operations"] = {"hold": {"proposal_ttl_seconds": operation_ttl}}
        return parse_policy(data)

    def waits(p, declared=None):
        return p.proposal_ttl_for("hold", p.risk.tiers[0], declared).total_seconds()

    two_hours = timedelta(hours=2)
    assert waits(policy()) == 900  # the policy's default
    assert waits(policy(tier_ttl=86400)) == 86400  # its tier's
    assert waits(policy(tier_ttl=86400), two_hours) == 7200  # the tool's own
    assert waits(policy(operation_ttl=60, tier_ttl=86400), two_hours) == 60  # the policy's word
    assert Policy().proposal_ttl_for("hold", None, two_hours) == two_hours  # no rules at all
    with pytest.raises(PolicyError, match="top-level proposal_ttl_seconds"):
        parse_policy({"version": "x", "tiers": [{"name": "a", "min_score": 0}],
                      "operations": {"default": {"proposal_ttl_seconds": 60}}})  # fmt: skip
