"""The policy file's shape, checked strictly before anything is read from it.

A key the parser does not know is never ignored: TOML puts every key written after a
`[table]` header into that table, so a key meant for the top level silently lands in
the table above it (`count_bands` under `[amount_bands]` became a currency nobody
pays in). Each refusal names the table and the key, on one line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

TOP_LEVEL = "top level"
CURRENCY = re.compile(r"[A-Z]{3}")

# key -> the type its value must have ("bands": a list of [at least, points] pairs)
_TOP: dict[str, Any] = {
    "version": str,
    "audience": str,
    "proposal_ttl_seconds": int,
    "token_ttl_seconds": int,
    "default_trust": str,
    "count_bands": "bands",
    "points": dict,
    "trust": dict,
    "amount_bands": dict,
    "operations": dict,
    "tiers": list,
}
_WANTED: dict[Any, str] = {
    str: "a string",
    int: "an integer",
    bool: "true or false",
    dict: "a table",
    list: "a list",
    "bands": "a list of [at least, points] pairs of integers",
}
_REQUIRED = ("version", "tiers")
_POINTS: dict[str, Any] = {"irreversible": int, "external": int}
_OPERATION: dict[str, Any] = {"sensitivity": int, "retype": dict, "proposal_ttl_seconds": int}
_RETYPE: dict[str, Any] = {"field": str, "match": str}
_TIER: dict[str, Any] = {
    "name": str,
    "min_score": int,
    "retype": bool,
    "second_approver": bool,
    "token_ttl_seconds": int,
    "proposal_ttl_seconds": int,
}


def check_shape(data: Mapping[str, Any]) -> None:
    """Raise ValueError naming the table and key of the first unknown or mistyped key."""
    _check_table(data, _TOP, TOP_LEVEL)
    for key in _REQUIRED:
        if key not in data:
            raise ValueError(f"{TOP_LEVEL} key {key!r} is missing")
    _check_table(data.get("points", {}), _POINTS, "[points]")
    for level, points in data.get("trust", {}).items():
        _check_value(points, int, "[trust]", level)
    for currency, bands in data.get("amount_bands", {}).items():
        if currency != "default" and not CURRENCY.fullmatch(currency):
            raise ValueError(
                f"[amount_bands] key {currency!r} is not a currency code (three capital "
                f"letters) or 'default'{_belongs_elsewhere(currency)}"
            )
        _check_value(bands, "bands", "[amount_bands]", currency)
    for name, rule in data.get("operations", {}).items():
        table = f"[operations.{name}]"
        _check_value(rule, dict, "[operations]", name)
        _check_table(rule, _OPERATION, table)
        _check_table(rule.get("retype", {}), _RETYPE, f"{table} retype")
    for number, tier in enumerate(data.get("tiers", []), start=1):
        _check_value(tier, dict, "[[tiers]]", f"#{number}")
        _check_table(tier, _TIER, f"[[tiers]] #{number}")


def _check_table(table: Mapping[str, Any], allowed: dict[str, Any], name: str) -> None:
    for key, value in table.items():
        if key not in allowed:
            raise ValueError(
                f"unknown key {key!r} in {name}{_belongs_elsewhere(key, name)}; "
                f"allowed there: {', '.join(sorted(allowed))}"
            )
        _check_value(value, allowed[key], name, key)


def _check_value(value: Any, kind: Any, table: str, key: str) -> None:
    if not _fits(value, kind):
        raise ValueError(f"{table} key {key!r} must be {_WANTED[kind]}, got {value!r}")


def _fits(value: Any, kind: Any) -> bool:
    if kind == "bands":
        return isinstance(value, list) and all(
            isinstance(pair, list) and len(pair) == 2 and all(_is_int(v) for v in pair)
            for pair in value
        )
    if kind is int:
        return _is_int(value)
    return isinstance(value, kind)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _belongs_elsewhere(key: str, found_in: str = "") -> str:
    """A hint for a key that is valid, just not where it was written."""
    if key in _TOP and found_in != TOP_LEVEL:
        return f" ({key} belongs at the top level, above the first [table] header)"
    if key in _POINTS and found_in != "[points]":
        return f" ({key} belongs in [points])"
    return ""
