"""Amounts an approver typed in the display form, made machine values exactly.

The page's edit form shows an amount in major units ("25.00", as the card shows
"¥25.00"). It sends that text; here it becomes minor units with Decimal (never a
float), in the currency the edit names, else the proposal's. An integer keeps its
meaning (minor units), so API clients that send machine values are unaffected.
"""

from __future__ import annotations

from typing import Any

from writegate.approval.errors import ValidationFailed
from writegate.approval.money import CURRENCIES, AmountError, parse_major


def minor_units(args: dict[str, Any], proposal_args: dict[str, Any]) -> dict[str, Any]:
    """`args` with every *_minor value given as text converted to an integer."""
    currency = args.get("currency", proposal_args.get("currency"))
    converted = dict(args)
    for name, value in args.items():
        if not (name.endswith("_minor") and isinstance(value, str)):
            continue
        if currency not in CURRENCIES:
            raise ValidationFailed(f"{name} needs a known currency to read {value!r}")
        try:
            converted[name] = parse_major(value, str(currency))
        except AmountError as exc:
            raise ValidationFailed(f"{name}: {exc}") from exc
    return converted
