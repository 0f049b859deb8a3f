"""The currencies the demo's tools accept: a closed set, listed in their JSON schemas.

Amounts are integers in the currency's minor unit; how one is shown to a person and
read back is the library's (`writegate.format_minor`, `writegate.describe_currency`).
"""

from __future__ import annotations

from typing import Literal, get_args

CurrencyCode = Literal["CNY", "USD", "EUR", "JPY"]
CURRENCY_CODES: tuple[str, ...] = get_args(CurrencyCode)
