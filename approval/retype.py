"""The re-typed key field: what a tier with `retype = true` asks a person to type again.

The policy names the field per operation (`[operations.<name>] retype`). For an
operation it names none, the field is what the tool declared is at stake: its amount
(`write_tool(amount=...)`, or arguments named `amount_minor`), typed as the preview
shows it, else its scope's count (`scope=`). With none of these a tier cannot ask what
it promises, and the write is refused when proposed (`retype_unavailable`) instead of
being confirmed with less; where every call of a tool would meet that, the policy is
refused when writegate opens. The expected value is frozen into the proposal.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from writegate.approval.errors import RetypeMismatch, RetypeUnavailable
from writegate.approval.models import Proposal, SideEffect
from writegate.approval.policy import OperationRule, PolicyError, RiskRules, Tier
from writegate.approval.spec import ToolSpec

_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?")
_HINTS = {
    "number": "type the {label} exactly as the preview shows it ({field})",
    "last4": "type the last four characters of the {label} ({field})",
    "exact": "type the {label} exactly as the preview shows it ({field})",
}
# The risk inputs a tool's own declaration fills: a fallback for every call.
_STAKES = ("amount_minor", "count")
_ASK = 'add [operations.{name}] retype = {{ field = "...", match = "exact" }} to the policy file'
_OR_DECLARE = "or declare what the call moves with write_tool(amount=...) or scope=..."


@dataclass(frozen=True)
class Retype:
    """The field to type again and how it must match. `expected` (value and display)
    when it is not a field of the preview: a declared amount or count."""

    field: str
    match: str
    expected: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        rule: dict[str, Any] = {"field": self.field, "match": self.match}
        if self.expected is not None:
            rule["expected"] = self.expected
        return rule

    def hint(self) -> str:
        return hint(self.match, self.field)


def hint(match: str, field: str) -> str:
    label = field.removesuffix("_minor").replace("_", " ")
    return _HINTS[match].format(label=label, field=field)


def retype_for(rule: OperationRule, inputs: dict[str, Any]) -> Retype | None:
    """The policy's field for the operation, else the declared amount, else the count."""
    if rule.retype_field:
        return Retype(rule.retype_field, rule.retype_match)
    amount, count = inputs.get("amount_minor"), inputs.get("count")
    if type(amount) is int:
        shown = inputs.get("amount_display") or str(amount)
        return Retype("amount", "number", {"value": amount, "display": str(shown)})
    if type(count) is int:
        return Retype("count", "number", {"value": count, "display": str(count)})
    return None


def require_retype(tier: Tier, retype: Retype | None, inputs: dict[str, Any]) -> None:
    """A new proposal at a tier that asks for a re-typed field gets one it can check,
    or is refused (nothing is stored). `inputs["fields"]`: the names it can show."""
    if not tier.retype:
        return
    operation = inputs["operation"]
    if retype is None:
        raise RetypeUnavailable(
            f"{operation}'s confirmation tier {tier.name!r} asks the person to re-type a "
            f"key field, and there is none: the policy names no [operations.{operation}] "
            f"retype field and the tool declares no amount= or scope=. Nothing was "
            f"proposed; an operator must {_ASK.format(name=operation)}, {_OR_DECLARE}.",
            operation=operation,
            tier=tier.name,
        )
    fields = inputs.get("fields")
    if retype.expected is None and fields is not None and retype.field not in fields:
        raise RetypeUnavailable(
            f"the policy's [operations.{operation}] retype field {retype.field!r} is "
            f"neither an argument nor a preview field of {operation} (it has "
            f"{', '.join(fields)}); nothing was proposed: an operator must name one of them.",
            operation=operation,
            field=retype.field,
        )


def every_call_retyped_without_a_field(rules: RiskRules, spec: ToolSpec) -> Tier | None:
    """The tier every call of `spec` reaches at least, when that and every tier above it
    ask for a re-typed field and neither the policy nor the tool says what it is."""
    if not spec.requires_approval or rules.operation(spec.name).retype_field:
        return None
    declared = set(spec.declared_stakes)
    declared |= set(spec.json_schema().get("properties", {}))
    if declared & set(_STAKES):
        return None  # a declared amount or count: there is always something to type
    effect = spec.side_effect
    lowest = (
        (rules.irreversible if effect is not SideEffect.REVERSIBLE else 0)
        + (rules.external if effect is SideEffect.EXTERNAL else 0)
        + rules.operation(spec.name).sensitivity
        + min(rules.trust.values(), default=0)
    )
    reached = rules.tier_for(lowest)
    above = [tier for tier in rules.tiers if tier.min_score >= reached.min_score]
    return reached if all(tier.retype for tier in above) else None


def check_tools(rules: RiskRules | None, specs: Iterable[ToolSpec], version: str) -> None:
    """Refuse a policy under which every call of a tool would be refused for want of a
    field to re-type: said when writegate opens, not to each person who asks."""
    if rules is None:
        return
    for spec in specs:
        tier = every_call_retyped_without_a_field(rules, spec)
        if tier is not None:
            arguments = ", ".join(spec.json_schema().get("properties", {})) or "none"
            raise PolicyError(
                f"policy {version}: every call of {spec.name} reaches tier {tier.name!r} or "
                f"above, which asks the person to re-type a key field, and {spec.name} has "
                f"none: {_ASK.format(name=spec.name)} (its arguments: {arguments}), "
                f"{_OR_DECLARE}"
            )


def check_retyped(proposal: Proposal, retyped: str | None) -> None:
    """The re-typed key field must match the canonical value the preview showed."""
    rule = (proposal.risk or {}).get("retype")
    if not rule:
        return
    name, match = rule["field"], rule["match"]
    expected = rule.get("expected")
    if expected is not None:  # a declared amount or count, frozen when proposed
        value, display = expected["value"], str(expected["display"])
    else:
        fields = proposal.preview.get("fields", [])
        field = next((f for f in fields if f.get("name") == name), None)
        value = proposal.args.get(name, field.get("value") if field else None)
        display = str(field.get("display")) if field else str(value)
        if field is not None and field.get("value") != value:
            raise RetypeMismatch("the preview does not match the arguments", field=name)
    if not retyped or not retyped.strip():
        raise RetypeMismatch(
            f"this confirmation needs the {name} re-typed: {hint(match, name)}",
            field=name,
            missing=True,
        )
    if not _matches(match, retyped.strip(), value, display):
        raise RetypeMismatch(
            f"the re-typed {name} does not match the preview; {hint(match, name)}",
            field=name,
        )


def _number(text: str) -> Decimal | None:
    found = _NUMBER.findall(text)
    if len(found) != 1:
        return None
    try:
        return Decimal(found[0].replace(",", ""))
    except InvalidOperation:
        return None


def _matches(match: str, typed: str, value: Any, display: str) -> bool:
    if match == "number":
        shown, given = _number(display), _number(typed)
        return shown is not None and given is not None and shown == given
    if match == "last4":
        text = str(value).casefold()
        return typed.casefold() in (text[-4:], text)
    return typed == display.strip() or typed == str(value)
