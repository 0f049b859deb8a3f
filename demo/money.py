"""Money in minor units, and how to show it to a person.

Amounts are integers in the currency's minor unit (fen, cents; yen has none), so an
amount has exactly one machine form. Display strings are made for previews; what a
person types in the display form ("¥600.00", "600.00", "CNY 1,000.50") is read back by
`parse_major` exactly, with Decimal, and refused when it does not fit the currency.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Literal, get_args

from writegate.approval.money import grouped, minor_exponent

# The closed set of currencies the tools accept; the JSON schemas list exactly these.
CurrencyCode = Literal["CNY", "USD", "EUR", "JPY"]
CURRENCY_CODES: tuple[str, ...] = get_args(CurrencyCode)


@dataclass(frozen=True)
class CurrencyInfo:
    code: str
    symbol: str
    decimals: int
    name: str


def _info(code: str, symbol: str, name: str) -> CurrencyInfo:
    exponent = minor_exponent(code)  # the library's table: one source of decimal places
    assert exponent is not None
    return CurrencyInfo(code, symbol, exponent, name)


CURRENCIES: dict[str, CurrencyInfo] = {
    "CNY": _info("CNY", "¥", "Chinese yuan"),
    "USD": _info("USD", "$", "US dollar"),
    "EUR": _info("EUR", "€", "euro"),
    "JPY": _info("JPY", "¥", "Japanese yen"),
}


def format_minor(amount_minor: int, currency: str) -> str:
    """19900 CNY -> "¥199.00"; 19900 JPY -> "¥19,900"; negative amounts get a leading "-"."""
    info = CURRENCIES.get(currency)
    sign = "-" if amount_minor < 0 else ""
    magnitude = abs(amount_minor)
    if info is None:
        # An unknown currency's decimal places are unknown too: show the raw figure
        # rather than guess where the point goes.
        return f"{sign}{magnitude} minor units of {currency}"
    return f"{sign}{info.symbol}{grouped(magnitude, info.decimals)}"


def describe_currency(currency: str) -> str:
    """ "CNY" -> "CNY (Chinese yuan)"."""
    info = CURRENCIES.get(currency)
    return f"{currency} ({info.name})" if info else currency


# Digits with optional thousands commas, then an optional fraction.
_NUMBER = re.compile(r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
_FULL_WIDTH_YEN = "\uffe5"


class AmountError(ValueError):
    """Typed text that is not an amount in the given currency; the message says why."""


def parse_major(text: str, currency: str) -> int:
    """ "¥600.00" / "600.00" / "CNY 600" in CNY -> 60000 minor units, exactly.

    The currency code or its symbol may lead (the code may also trail); more decimal
    places than the currency has, another currency's symbol, a sign, or anything that
    is not a number is refused.
    """
    info = CURRENCIES.get(currency)
    if info is None:
        raise AmountError(f"{currency} is not a currency with known decimal places")
    rest = text.strip().replace(_FULL_WIDTH_YEN, "¥")
    upper = rest.upper()
    if upper.startswith(info.code):
        rest = rest[len(info.code) :].strip()
    elif upper.endswith(info.code):
        rest = rest[: -len(info.code)].strip()
    if rest.startswith(info.symbol):
        rest = rest[len(info.symbol) :].strip()
    if not _NUMBER.fullmatch(rest):
        example = format_minor(10 ** (info.decimals + 1), currency)
        raise AmountError(f"{text.strip()!r} is not an amount in {currency} (e.g. {example})")
    try:
        value = Decimal(rest.replace(",", ""))
    except InvalidOperation as exc:  # unreachable after the pattern, kept for safety
        raise AmountError(f"{text.strip()!r} is not a number") from exc
    minor = value.scaleb(info.decimals)
    if minor != minor.to_integral_value():
        raise AmountError(f"{currency} has {info.decimals} decimal place(s): {text.strip()!r}")
    return int(minor)


def format_major(amount_minor: int, currency: str) -> str:
    """19900 CNY -> "199.00": the editable form, without symbol or grouping."""
    info = CURRENCIES.get(currency)
    if info is None or info.decimals == 0:
        return str(amount_minor)
    return str(
        Decimal(amount_minor).scaleb(-info.decimals).quantize(Decimal(1).scaleb(-info.decimals))
    )
