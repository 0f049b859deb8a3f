"""Money in minor units, and how to show it to a person.

Amounts are integers in the currency's minor unit (fen, cents; yen has none), so an
amount has exactly one machine form. Display strings exist only for previews and are
never parsed back into amounts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

# The closed set of currencies the tools accept; the JSON schemas list exactly these.
CurrencyCode = Literal["CNY", "USD", "EUR", "JPY"]
CURRENCY_CODES: tuple[str, ...] = get_args(CurrencyCode)


@dataclass(frozen=True)
class CurrencyInfo:
    code: str
    symbol: str
    decimals: int
    name: str


CURRENCIES: dict[str, CurrencyInfo] = {
    "CNY": CurrencyInfo("CNY", "¥", 2, "Chinese yuan"),
    "USD": CurrencyInfo("USD", "$", 2, "US dollar"),
    "EUR": CurrencyInfo("EUR", "€", 2, "euro"),
    "JPY": CurrencyInfo("JPY", "¥", 0, "Japanese yen"),
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
    if info.decimals == 0:
        return f"{sign}{info.symbol}{magnitude:,}"
    major, minor = divmod(magnitude, 10**info.decimals)
    return f"{sign}{info.symbol}{major:,}.{minor:0{info.decimals}d}"


def describe_currency(currency: str) -> str:
    """ "CNY" -> "CNY (Chinese yuan)"."""
    info = CURRENCIES.get(currency)
    return f"{currency} ({info.name})" if info else currency
