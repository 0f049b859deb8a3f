"""Canonical JSON and digests.

Every argument set that a person confirms is reduced to one byte string so that the
digest bound into a confirmation token means exactly one operation. Two objects that
mean the same thing (key order aside) give the same bytes; anything that could be
read two ways (floats for money, NaN, naive datetimes) is refused instead of guessed.

Text that no store or screen can carry faithfully is refused too, before anything is
written: control characters (NUL, ESC, backspace...; in values the ordinary whitespace
tab, newline and carriage return is allowed, in object keys nothing), lone surrogates
(no UTF-8 form), and nesting deeper than `MAX_DEPTH` objects and arrays. Each refusal
is a `CanonicalizationError`, which is a `validation_failed` error. So is an integer
beyond +-(2**53 - 1): other languages read JSON numbers as doubles and would round it.

Two byte forms exist, each named by a digest scheme stored on every ledger row:
`jcs-sha256` (RFC 8785, written for every new row: any JCS library recomputes it) and
`wg-c14n-1` (sorted keys by code point, compact, UTF-8; rows written before JCS). For
every accepted value whose object keys are all in the Basic Multilingual Plane the two
give identical bytes; they differ only in key order when a key holds a character above
U+FFFF, which JCS sorts by UTF-16 code units. See docs/protocol.md, "Digests others can
verify", and tests/vectors/args_digest.json.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections.abc import Callable
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import rfc8785

from writegate.approval.errors import CanonicalizationError

__all__ = [
    "DIGEST_SCHEME",
    "DIGEST_SCHEMES",
    "JCS_SCHEME",
    "LEGACY_SCHEME",
    "MAX_DEPTH",
    "MAX_SAFE_INTEGER",
    "CanonicalizationError",
    "canonical_json",
    "check_input",
    "digest",
    "hash_secret",
    "request_fingerprint",
    "to_rfc3339",
]

DIGEST_PREFIX = "sha256:"
# Objects and arrays nested deeper than this are refused: no tool argument needs more,
# and a bound far below Python's recursion limit keeps every walker over them safe.
MAX_DEPTH = 32
# The largest integer a double holds exactly; beyond it other languages round (I-JSON).
MAX_SAFE_INTEGER = 2**53 - 1
JCS_SCHEME = "jcs-sha256"
LEGACY_SCHEME = "wg-c14n-1"
# What every new row is written with; older rows keep the scheme stored beside them.
DIGEST_SCHEME = JCS_SCHEME
# Control characters (Unicode category Cc) other than tab, newline and carriage return,
# which a string value may hold; an object key holds no control character at all.
_VALUE_REFUSED = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
_KEY_REFUSED = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def _check_text(text: str, path: str, refused: re.Pattern[str]) -> None:
    """Refuse a lone surrogate or a control character; the message never echoes it."""
    found = refused.search(text)
    if found is None:
        return
    char, index = found.group(), found.start()
    what = "a lone surrogate" if "\ud800" <= char <= "\udfff" else "control character"
    raise CanonicalizationError(f"{path}: {what} U+{ord(char):04X} at character {index}")


def _normalize(value: Any, path: str, depth: int = 0, *, safe_ints: bool = True) -> Any:
    if isinstance(value, str):
        _check_text(value, path, _VALUE_REFUSED)
        return value
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if safe_ints and abs(value) > MAX_SAFE_INTEGER:
            raise CanonicalizationError(
                f"{path}: integer beyond +-(2**53 - 1); send it as a string"
            )
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
    if isinstance(value, dict | list | tuple) and depth >= MAX_DEPTH:
        raise CanonicalizationError(f"{path}: nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise CanonicalizationError(f"{path}: object keys must be strings")
            _check_text(key, f"{path} (a key)", _KEY_REFUSED)
            out[key] = _normalize(item, f"{path}.{key}", depth + 1, safe_ints=safe_ints)
        return out
    if isinstance(value, list | tuple):
        return [
            _normalize(item, f"{path}[{i}]", depth + 1, safe_ints=safe_ints)
            for i, item in enumerate(value)
        ]
    raise CanonicalizationError(f"{path}: unsupported type {type(value).__name__}")


def to_rfc3339(moment: datetime) -> str:
    """UTC, second precision unless there are microseconds, with a `Z` suffix."""
    utc = moment.astimezone(UTC)
    text = utc.isoformat(timespec="microseconds" if utc.microsecond else "seconds")
    return text.replace("+00:00", "Z")


def check_input(value: Any) -> None:
    """Refuse, before anything is stored, a value that has no canonical form."""
    _normalize(value, "$")


def _jcs(value: Any) -> bytes:
    # Every refusal above runs first, so the encoder only ever sees what it can encode.
    return rfc8785.dumps(_normalize(value, "$"))


def _legacy(value: Any) -> bytes:
    # Kept to recompute rows written before JCS; they may hold integers beyond 2**53.
    normalized = _normalize(value, "$", safe_ints=False)
    return json.dumps(
        normalized, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False
    ).encode("utf-8")


DIGEST_SCHEMES: dict[str, Callable[[Any], bytes]] = {JCS_SCHEME: _jcs, LEGACY_SCHEME: _legacy}


def canonical_json(value: Any, scheme: str = DIGEST_SCHEME) -> bytes:
    """The one byte form of `value` under `scheme` (RFC 8785 unless told otherwise)."""
    try:
        encode = DIGEST_SCHEMES[scheme]
    except KeyError:
        raise CanonicalizationError(f"unknown digest scheme {scheme!r}") from None
    return encode(value)


def digest(value: Any, scheme: str = DIGEST_SCHEME) -> str:
    """`sha256:` and the hex SHA-256 of the canonical bytes under `scheme`."""
    return DIGEST_PREFIX + hashlib.sha256(canonical_json(value, scheme)).hexdigest()


def request_fingerprint(tenant_id: str, tool_name: str, args: dict[str, Any]) -> str:
    """What makes two requests "the same request" for one idempotency key.

    Internal (no one outside recomputes it) and compared with rows written before JCS,
    so it stays on the legacy form: a retry across an upgrade still finds its request.
    """
    request = {"tenant_id": tenant_id, "tool_name": tool_name, "arguments": args}
    return digest(request, LEGACY_SCHEME)


def new_secret() -> str:
    """A confirmation token's secret, shown once; the ledger keeps its hash."""
    return "wgt_" + secrets.token_urlsafe(32)


def hash_secret(secret: str) -> str:
    """Tokens and API keys are stored only as this hash."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()
