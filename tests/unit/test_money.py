"""Amounts typed in the display form are read back exactly, or refused with a reason."""

from __future__ import annotations

import pytest

from writegate.approval.money import (
    AmountError,
    amount_display,
    format_major,
    format_minor,
    parse_major,
)


@pytest.mark.parametrize(
    ("text", "currency", "minor"),
    [
        ("¥600.00", "CNY", 60000),
        ("￥600.00", "CNY", 60000),
        ("10.00", "USD", 1000),
        ("$0.01", "USD", 1),
        ("CNY 1,000.50", "CNY", 100050),
        ("12.5 EUR", "EUR", 1250),
        ("¥19,900", "JPY", 19900),
        ("0.1", "USD", 10),  # 0.1 is exact in Decimal, where a float is not
    ],
)
def test_display_form_is_read_back_as_exact_minor_units(
    text: str, currency: str, minor: int
) -> None:
    assert parse_major(text, currency) == minor


@pytest.mark.parametrize(
    "text", ["1.005", "€10", "-5", "1e3", "", "10.0.0", "nan", "1,00", "ten", "¥1.00"]
)
def test_text_that_is_not_an_amount_in_the_currency_is_refused(text: str) -> None:
    with pytest.raises(AmountError):
        parse_major(text, "USD")


def test_editable_form_round_trips_through_parse() -> None:
    for minor, currency in ((19900, "CNY"), (5, "USD"), (600, "JPY"), (123456789, "EUR")):
        assert parse_major(format_major(minor, currency), currency) == minor
        assert parse_major(format_minor(minor, currency), currency) == minor


def test_a_declared_amount_is_shown_with_its_currencys_minor_unit_exponent() -> None:
    assert amount_display(100_000_000, "EUR") == "EUR 1,000,000.00"
    assert amount_display(150_000_000, "jpy") == "JPY 150,000,000"  # no minor unit
    assert amount_display(1_234_567, "KWD") == "KWD 1,234.567"  # three decimals
    assert amount_display(-5, "USD") == "USD -0.05"
    assert amount_display(7, "points") == "7 minor units of points"  # not a currency code
