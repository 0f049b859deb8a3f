"""An amount in minor units as a person reads it: `EUR 1,000,000.00`, `JPY 150,000`.

A declared amount (`write_tool(amount=...)`) is an integer in its currency's minor unit.
How many minor units make one major unit is the currency's exponent (ISO 4217): most
currencies have 2, a few none (JPY, KRW, ...) or 3 (KWD, BHD, ...). Any other
three-letter code is taken to have 2; a code that is not one shows the raw figure,
said to be in minor units, rather than guess where the point goes.

For a person typing an amount (the approval page's edit form, the chat), a few
currencies also have a symbol and a name (`CURRENCIES`): `format_minor` shows an amount
with its symbol ("¥199.00"), `format_major` gives the editable form ("199.00"), and
`parse_major` reads typed text back exactly, with Decimal, refusing what does not fit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

# The ISO 4217 currencies whose exponent is not 2.
_ZERO = "BIF CLP DJF GNF ISK JPY KMF KRW PYG RWF UGX UYI VND VUV XAF XOF XPF"
_THREE = "BHD IQD JOD KWD LYD OMR TND"
_EXPONENTS: dict[str, int] = {
    **dict.fromkeys(_ZERO.split(), 0),
    **dict.fromkeys(_THREE.split(), 3),
    **dict.fromkeys(("CLF", "UYW"), 4),
}


def minor_exponent(currency: str) -> int | None:
    """How many decimal places `currency` has; None if it is not a currency code."""
    code = currency.strip().upper()
    if len(code) != 3 or not code.isalpha() or not code.isascii():
        return None
    return _EXPONENTS.get(code, 2)


def grouped(amount_minor: int, exponent: int) -> str:
    """100000000, 2 -> "1,000,000.00"; 150000000, 0 -> "150,000,000"; a leading "-"."""
    sign = "-" if amount_minor < 0 else ""
    if exponent == 0:
        return f"{sign}{abs(amount_minor):,}"
    major, minor = divmod(abs(amount_minor), 10**exponent)
    return f"{sign}{major:,}.{minor:0{exponent}d}"


def amount_display(amount_minor: int, currency: str) -> str:
    """100000000 EUR -> "EUR 1,000,000.00": what a preview shows and a re-type accepts."""
    exponent = minor_exponent(currency)
    if exponent is None:
        return f"{amount_minor} minor units of {currency}"
    return f"{currency.strip().upper()} {grouped(amount_minor, exponent)}"


@dataclass(frozen=True)
class CurrencyInfo:
    code: str
    symbol: str
    decimals: int
    name: str


def _info(code: str, symbol: str, name: str) -> CurrencyInfo:
    exponent = minor_exponent(code)  # the table above: one source of decimal places
    assert exponent is not None
    return CurrencyInfo(code, symbol, exponent, name)


CURRENCIES: dict[str, CurrencyInfo] = {
    "CNY": _info("CNY", "¥", "Chinese yuan"),
    "USD": _info("USD", "$", "US dollar"),
    "EUR": _info("EUR", "€", "euro"),
    "JPY": _info("JPY", "¥", "Japanese yen"),
}


def format_minor(amount_minor: int, currency: str) -> str:
    """An amount in minor units with its currency's symbol, as a preview shows it.

    19900 CNY -> "¥199.00"; 19900 JPY -> "¥19,900"; a negative amount gets a leading
    "-". A currency without a known symbol (one of CNY, USD, EUR, JPY) shows the raw
    figure, "19900 minor units of GBP", rather than guess.
    """
    info = CURRENCIES.get(currency)
    sign = "-" if amount_minor < 0 else ""
    magnitude = abs(amount_minor)
    if info is None:
        # An unknown currency's decimal places are unknown too: show the raw figure
        # rather than guess where the point goes.
        return f"{sign}{magnitude} minor units of {currency}"
    return f"{sign}{info.symbol}{grouped(magnitude, info.decimals)}"


def describe_currency(currency: str) -> str:
    """A currency's code with its name: "CNY" -> "CNY (Chinese yuan)"; a code without
    a known name (one of CNY, USD, EUR, JPY) is returned as it is."""
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
