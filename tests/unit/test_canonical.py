"""Canonical JSON: order never changes a digest; different meanings never share one."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from writegate.approval.canonical import (
    MAX_DEPTH,
    MAX_SAFE_INTEGER,
    CanonicalizationError,
    canonical_json,
    digest,
    to_rfc3339,
)
from writegate.approval.errors import ValidationFailed

# Text a canonical form can hold: no control characters but tab/newline/CR, no surrogates.
_VALUE_CHARS = st.characters(blacklist_categories=("Cc", "Cs"), whitelist_characters="\t\n\r")
_KEY_CHARS = st.characters(blacklist_categories=("Cc", "Cs"))
# Integers within +-(2**53 - 1): beyond it a value is refused (see test_digest_schemes.py).
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER),
    st.text(_VALUE_CHARS, max_size=20),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(_KEY_CHARS, max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def _shuffled(value, rng):
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: _shuffled(v, rng) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rng) for v in value]
    return value


@given(values, st.integers(0, 2**32))
def test_key_order_never_changes_a_digest(value, seed):
    assert digest(_shuffled(value, random.Random(seed))) == digest(value)


def _meaning(value):
    """A structural identity: key order ignored, bool kept apart from int."""
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, _meaning(v)) for k, v in value.items())))
    if isinstance(value, list):
        return ("list", tuple(_meaning(v) for v in value))
    return (type(value).__name__, value)


@given(values, values)
def test_values_that_differ_in_meaning_never_share_a_digest(a, b):
    assert (digest(a) == digest(b)) == (_meaning(a) == _meaning(b))


@given(values)
def test_a_value_and_its_reordered_copy_mean_the_same(value):
    assert _meaning(_shuffled(value, random.Random(7))) == _meaning(value)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ({"amount_minor": 19900}, {"amount_minor": "19900"}),
        ({"amount_minor": 1}, {"amount_minor": True}),
        ({"x": None}, {}),
        ({"ids": ["a", "b"]}, {"ids": ["b", "a"]}),
    ],
)
def test_near_misses_differ(a, b):
    assert digest(a) != digest(b)


@pytest.mark.parametrize("bad", [1.5, 199.0, math.nan, math.inf])
def test_floats_and_nan_are_refused(bad):
    with pytest.raises(CanonicalizationError):
        canonical_json({"amount": bad})


def test_utf8_not_ascii_escapes_and_compact():
    assert canonical_json({"b": "商品破损", "a": 1}) == '{"a":1,"b":"商品破损"}'.encode()


def test_times_are_utc_rfc3339_and_naive_times_are_refused():
    east8 = timezone(timedelta(hours=8))
    assert to_rfc3339(datetime(2026, 9, 1, 14, 25, tzinfo=east8)) == "2026-09-01T06:25:00Z"
    assert canonical_json({"t": datetime(2026, 9, 1, 6, 25, tzinfo=UTC)}) == (
        b'{"t":"2026-09-01T06:25:00Z"}'
    )
    with pytest.raises(CanonicalizationError):
        canonical_json({"t": datetime(2026, 9, 1)})


def _nested(depth: int) -> object:
    value: object = "x"
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "bad",
    [
        {"reason": "broken\u0000"},
        {"reason": "\u001b[2K\rok"},
        {"reason": "back\bspace"},
        {"reason": "\u001b]8;;http://x\u0007link"},
        {"reason": "c1 \u009b control"},
        {"reason": "lone \ud800"},
        {"reason": "low \udc00 alone"},
        {"key\u0000": 1},
        {"key\n": 1},
        {"deep": _nested(MAX_DEPTH)},
        {"deep": _nested(950)},
    ],
)
def test_unstorable_text_and_deep_nesting_are_refused_as_validation_failed(bad):
    with pytest.raises(CanonicalizationError) as refused:
        digest(bad)
    assert isinstance(refused.value, ValidationFailed)
    assert refused.value.code == "validation_failed"
    message = refused.value.message
    assert message.isprintable() and "\ud800" not in message and "\udc00" not in message


def test_ordinary_whitespace_and_nesting_up_to_the_bound_are_kept():
    text = "line one\n\tline two\r\n"
    assert (
        canonical_json({"reason": text})
        == ('{"reason":"' + "line one\\n\\tline two\\r\\n" + '"}').encode()
    )
    digest({"deep": _nested(MAX_DEPTH - 1)})  # 32 levels with the outer object: allowed
