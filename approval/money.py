"""An amount in minor units as a person reads it: `EUR 1,000,000.00`, `JPY 150,000`.

A declared amount (`write_tool(amount=...)`) is an integer in its currency's minor unit.
How many minor units make one major unit is the currency's exponent (ISO 4217): most
currencies have 2, a few none (JPY, KRW, ...) or 3 (KWD, BHD, ...). Any other
three-letter code is taken to have 2; a code that is not one shows the raw figure,
said to be in minor units, rather than guess where the point goes.
"""

from __future__ import annotations

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
