"""Canonical JSON and digests.

Every argument set that a person confirms is reduced to one byte string so that the
digest bound into a confirmation token means exactly one operation. Two objects that
mean the same thing (key order aside) give the same bytes; anything that could be
read two ways (floats for money, NaN, naive datetimes) is refused instead of guessed.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

DIGEST_PREFIX = "sha256:"


class CanonicalizationError(ValueError):
    """A value has no single canonical form (a float, NaN, a naive time...)."""


def _normalize(value: Any, path: str) -> Any:
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float | Decimal):
        # Money and counts are integers in minor units; a float has no canonical
        # reading (199 vs 199.0 vs 1.99e2) and NaN has none at all.
        raise CanonicalizationError(f"{path}: floats are not allowed, use integers")
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise CanonicalizationError(f"{path}: datetime without a time zone")
        return to_rfc3339(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise CanonicalizationError(f"{path}: object keys must be strings")
            out[key] = _normalize(item, f"{path}.{key}")
        return out
    if isinstance(value, list | tuple):
        return [_normalize(item, f"{path}[{i}]") for i, item in enumerate(value)]
    raise CanonicalizationError(f"{path}: unsupported type {type(value).__name__}")


def to_rfc3339(moment: datetime) -> str:
    """UTC, second precision unless there are microseconds, with a `Z` suffix."""
    utc = moment.astimezone(UTC)
    text = utc.isoformat(timespec="microseconds" if utc.microsecond else "seconds")
    return text.replace("+00:00", "Z")


def canonical_json(value: Any) -> bytes:
    """Sorted keys, compact separators, UTF-8 (not ASCII escapes), no NaN."""
    normalized = _normalize(value, "$")
    return json.dumps(
        normalized, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False
    ).encode("utf-8")


def digest(value: Any) -> str:
    return DIGEST_PREFIX + hashlib.sha256(canonical_json(value)).hexdigest()


def request_fingerprint(tenant_id: str, tool_name: str, args: dict[str, Any]) -> str:
    """What makes two requests "the same request" for one idempotency key."""
    return digest({"tenant_id": tenant_id, "tool_name": tool_name, "arguments": args})


def hash_secret(secret: str) -> str:
    """Tokens and API keys are stored only as this hash."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()
