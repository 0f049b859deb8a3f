"""Risk per proposal, the tier it leads to, and the checks a tier asks for.

R = f(amount or scope, irreversibility, sensitivity, external reach, trust). The inputs
come from the canonical arguments, the tool's preview flags and the caller's identity
(trust is set by the host's run config, never by model arguments); the points and the
tiers come from the versioned policy. The inputs are frozen into the proposal, so a
later policy can re-judge exactly what was confirmed.

A stronger tier never hides anything: the preview keeps every argument and only gains a
`confirmation` block saying which tier applies and why.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from writegate.approval.models import Identity, Proposal
from writegate.approval.money import amount_display
from writegate.approval.policy import Policy, RiskRules, Tier
from writegate.approval.retype import Retype, check_retyped, require_retype, retype_for

__all__ = [
    "Assessment",
    "assess",
    "check_retyped",  # approval/retype.py's, where the re-typed field is decided
    "reassess",
    "requires_fresh_confirmation",
    "risk_inputs",
    "token_ttl",
]

LEGACY_TIER = Tier(name="one_click", min_score=0)


@dataclass(frozen=True)
class Assessment:
    score: int
    tier: Tier
    reasons: tuple[str, ...]
    inputs: dict[str, Any]
    retype: Retype | None  # what a retype tier asks to type again (approval/retype.py)

    def to_dict(self) -> dict[str, Any]:
        """What the proposal stores: enough to re-judge it under another policy."""
        return {
            "score": self.score,
            "tier": self.tier.requirements(),
            "reasons": list(self.reasons),
            "inputs": self.inputs,
            "retype": self.retype.to_dict() if self.tier.retype and self.retype else None,
        }

    def confirmation(self, policy: Policy, waits: timedelta) -> dict[str, Any]:
        """The preview's `confirmation` block: the tier, why, and what it asks of people;
        `waits` is how long the proposal waits for its decision."""
        ttl = self.tier.token_ttl or policy.token_ttl
        block: dict[str, Any] = {
            "tier": self.tier.name,
            "score": self.score,
            "reasons": list(self.reasons),
            "second_approver": self.tier.second_approver,
            "token_ttl_seconds": int(ttl.total_seconds()),
            "proposal_ttl_seconds": int(waits.total_seconds()),
            "policy_version": policy.version,
        }
        if self.tier.retype and self.retype:
            block["retype_field"] = self.retype.field
            block["retype_hint"] = self.retype.hint()
        return block


def risk_inputs(
    operation: str,
    args: dict[str, Any],
    preview: dict[str, Any],
    identity: Identity,
    declared: dict[str, Any],
) -> dict[str, Any]:
    """The facts risk is judged on. `declared` (the tool's `risk_inputs(args)`) adds or
    corrects them: a tool's declared amount (`amount_minor`, `currency`) or scope
    (`count`). `fields`: the names a re-typed field may have (its arguments and preview
    fields)."""
    shown = {f.get("name"): f.get("display") for f in preview.get("fields", [])}
    amount = args.get("amount_minor")
    count = args.get("count")
    inputs: dict[str, Any] = {
        "operation": operation,
        "amount_minor": amount if type(amount) is int else None,
        "currency": args.get("currency") if isinstance(args.get("currency"), str) else None,
        "amount_display": shown.get("amount_minor"),
        "count": count if type(count) is int else None,
        "irreversible": bool(preview.get("irreversible")),
        "external": bool(preview.get("external")),
        "trust": identity.trust,
        "fields": sorted({*args, *(name for name in shown if isinstance(name, str))}),
    }
    inputs.update(declared)
    if "amount_minor" in declared and "amount_display" not in declared:
        inputs["amount_display"] = _amount_shown(preview, declared)
    return inputs


def _amount_shown(preview: dict[str, Any], declared: dict[str, Any]) -> str:
    """What the person reads for a declared amount: the preview's money field showing
    it, else the amount in its currency's display form (`EUR 1,000,000.00`)."""
    amount, currency = declared["amount_minor"], declared.get("currency")
    for shown in preview.get("fields", []):
        if shown.get("money_of") and shown.get("value") == amount:
            return str(shown.get("display"))
    return amount_display(amount, str(currency or ""))


def _band(bands: tuple[tuple[int, int], ...], value: int) -> int:
    points = 0
    for at, band_points in bands:
        if value >= at:
            points = band_points
    return points


def assess(rules: RiskRules | None, inputs: dict[str, Any]) -> Assessment:
    """Score a new proposal's inputs and pick its tier; every point comes with its
    reason. A tier asking for a re-typed field it cannot ask for refuses the proposal
    (`retype_unavailable`): it is never confirmed with less than its tier says."""
    judged = judge(rules, inputs)
    require_retype(judged.tier, judged.retype, inputs)
    return judged


def judge(rules: RiskRules | None, inputs: dict[str, Any]) -> Assessment:
    """`assess` without the refusal: the score, the tier and the field to re-type."""
    if rules is None:
        return Assessment(0, LEGACY_TIER, ("the policy has no risk rules",), inputs, None)
    reasons: list[str] = []
    score = 0

    def add(points: int, why: str) -> None:
        nonlocal score
        if points:
            score += points
            reasons.append(f"{why} ({points:+d})")

    op = rules.operation(inputs["operation"])
    amount, currency = inputs.get("amount_minor"), inputs.get("currency")
    if isinstance(amount, int):
        bands = rules.amount_bands.get(currency or "", rules.amount_bands.get("default", ()))
        # money moving either way is at stake: a credit of 1,000,000 scores as a charge
        add(_band(bands, abs(amount)), f"amount {inputs.get('amount_display') or amount}")
    if isinstance(inputs.get("count"), int):
        add(_band(rules.count_bands, inputs["count"]), f"{inputs['count']} items at once")
    add(rules.irreversible if inputs.get("irreversible") else 0, "cannot be undone")
    add(rules.external if inputs.get("external") else 0, "money or messages leave the system")
    if rules.lists(inputs["operation"]):
        add(op.sensitivity, f"sensitive operation {inputs['operation']}")
    else:  # the policy's [operations.default]: an operation it knows nothing about
        why = f"{inputs['operation']} is not listed in the policy's operations: counted as"
        add(op.sensitivity, f"{why} sensitive")
    level = inputs.get("trust") or rules.default_trust
    cautious = max(rules.trust.values(), default=0)
    add(rules.trust.get(level, cautious), f"trust {level}")
    tier = rules.tier_for(score)
    reasons.append(f"score {score}: tier {tier.name}")
    return Assessment(score, tier, tuple(reasons), inputs, retype_for(op, inputs))


def reassess(proposal: Proposal, policy: Policy) -> Assessment | None:
    """The proposal's frozen inputs judged under `policy`; None if it has no inputs."""
    if not proposal.risk or "inputs" not in proposal.risk:
        return None
    return judge(policy.risk, proposal.risk["inputs"])


def requires_fresh_confirmation(proposal: Proposal, made_under: str, policy: Policy) -> bool:
    """Would `policy` ask something else of this approval than the one it was given under?

    Same version: no. Otherwise yes, unless the current policy has rules and puts the
    proposal's frozen inputs in a tier with the same requirements as the one enforced.
    """
    if made_under == policy.version:
        return False
    if policy.risk is None:
        return True  # nothing proves the new policy agrees
    now = reassess(proposal, policy)
    enforced = (proposal.risk or {}).get("tier")
    return now is None or enforced is None or now.tier.requirements() != enforced


def token_ttl(proposal: Proposal, policy: Policy) -> Any:
    """The lifetime of a token for this proposal: its tier's, else the policy's."""
    tier_name = (proposal.risk or {}).get("tier", {}).get("tier", proposal.tier)
    tier = policy.risk.tier_named(tier_name) if policy.risk else None
    return (tier.token_ttl if tier else None) or policy.token_ttl
