"""Text rules behind the scripted demo model (see ``demo.scripted`` for the list).

Pure functions from request text and tool results to either a list of
``(tool_name, args)`` calls or a plain-text answer. When something is ambiguous
the rules ask a question rather than guess, because a guessed write is exactly
what this project exists to prevent.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

from langchain_core.messages import ToolCall, ToolMessage

# The error codes of a write that is not over yet: the executor's retries or the
# reconciler finish it (the library's list; a test pins that they agree).
UNSETTLED_CODES = frozenset(
    {
        "temporarily_unavailable",
        "rate_limited",
        "upstream_timeout",
        "deadline_exceeded",
        "outcome_unknown",
        "in_progress",
    }
)

Plan = list[tuple[str, dict[str, Any]]] | str

WRITE_TOOLS = frozenset({"refund_order", "update_ticket", "create_ticket"})
NO_RETRY_CODES = frozenset({"declined", "cancelled", "canceled", "expired"})
UNKNOWN_OUTCOMES = frozenset({"outcome_unknown", "unknown"})
DEFAULT_REASON = "customer request"

# ASCII look-arounds instead of \b: in "给ord_1001退款" the CJK neighbours are word
# characters too, so \b would miss the id.
_ORDER = re.compile(r"(?<![A-Za-z0-9_])ord_[A-Za-z0-9]+")
_TICKET = re.compile(r"(?<![A-Za-z0-9_])tkt_[A-Za-z0-9]+")
_STATUS = re.compile(r"(?<![A-Za-z_])(open|in[_ ]progress|resolved|closed)(?![A-Za-z_])", re.I)
_REFUND = re.compile(r"refund|退款", re.I)
_CREATE = re.compile(r"create ticket\s*[:：]\s*(.*)", re.I | re.S)
_DESCRIPTION = re.compile(r"description\s*[:：]", re.I)
_REASON = re.compile(r"because|reason\s*[:：]|原因\s*[:：]?|因为", re.I)
_NUMBER = re.compile(r"(?<![A-Za-z0-9_.])\d+(?:\.\d+)?")
_CURRENCY = re.compile(r"(?<![A-Za-z])(CNY|USD|EUR|RMB)(?![A-Za-z])|([¥￥$€元])", re.I)
_SYMBOLS = {"¥": "CNY", "￥": "CNY", "元": "CNY", "$": "USD", "€": "EUR", "RMB": "CNY"}

HELP = (
    "I only understand a few requests: 'refund ord_1001' (optionally with an amount "
    "and 'because …'), 'set tkt_1 to resolved', 'create ticket: TITLE', "
    "'list orders' and 'list tickets'."
)


def is_refund_request(text: str) -> bool:
    return bool(_REFUND.search(text))


def _unique(pattern: re.Pattern[str], text: str) -> list[str]:
    return list(dict.fromkeys(m.group(0) for m in pattern.finditer(text)))


def plan_request(text: str) -> Plan:
    """Rule 1: the first calls for a new request, or help / a question."""
    if created := _CREATE.search(text):
        # Title is the first line; the description is what follows "description:",
        # else the remaining lines, else the title (strict schemas require a string).
        head, *described = _DESCRIPTION.split(created.group(1), maxsplit=1)
        title, _, rest = head.strip().partition("\n")
        title = title.strip().rstrip(".。")
        if not title:
            return "What should the new ticket be called?"
        description = (described[0] if described else rest).strip() or title
        return [("create_ticket", {"title": title, "description": description})]
    orders = _unique(_ORDER, text)
    if orders and is_refund_request(text):
        return [("get_order", {"order_id": order_id}) for order_id in orders]
    tickets = _unique(_TICKET, text)
    statuses = list(dict.fromkeys(s.lower().replace(" ", "_") for s in _STATUS.findall(text)))
    if tickets and len(statuses) > 1:
        return f"Which status do you mean: {', '.join(statuses)}?"
    if tickets and statuses:
        return [("update_ticket", {"ticket_id": t, "status": statuses[0]}) for t in tickets]
    if is_refund_request(text):
        return "Which order should be refunded? Please give its id, like ord_1001."
    lowered = text.lower()
    if "list orders" in lowered or "my orders" in lowered:
        return [("list_orders", {})]
    if "list tickets" in lowered or "my tickets" in lowered:
        return [("list_tickets", {})]
    return HELP


def _split_reason(text: str) -> tuple[str, str]:
    found = _REASON.search(text)
    if not found:
        return text, DEFAULT_REASON
    reason = text[found.end() :].strip(" \t\n:：.。!！")
    return text[: found.start()], reason or DEFAULT_REASON


def _explicit_amount(text: str) -> tuple[int | None, str | None] | str:
    """(amount in minor units or None, currency or None), or a question to ask."""
    keys = [code.upper() or symbol for code, symbol in _CURRENCY.findall(text)]
    currencies = {_SYMBOLS.get(key, key) for key in keys}
    if len(currencies) > 1:
        return f"You mentioned several currencies ({', '.join(sorted(currencies))}); which one?"
    currency = currencies.pop() if currencies else None
    numbers = _NUMBER.findall(text)
    if not numbers:
        return None, currency
    if len(numbers) > 1:
        return f"I see several amounts ({', '.join(numbers)}); which one should I refund?"
    if len(numbers[0].partition(".")[2]) > 2:
        return f"{numbers[0]} has more than two decimals; please write it like 50.00."
    # Decimal, not float: 19.99 * 100 must be exactly 1999.
    minor = int(Decimal(numbers[0]) * 100)
    return (minor, currency) if minor > 0 else "The refund amount must be more than zero."


def parse_result(message: ToolMessage | None) -> Any:
    """A tool result's JSON, or its raw text when it is not JSON."""
    if message is None:
        return None
    text = str(message.text)
    try:
        return json.loads(text)
    except ValueError:
        return text


def error_of(message: ToolMessage, data: Any) -> dict[str, Any] | None:
    """The ``{code, message, retryable}`` error in a result, if it is one."""
    if isinstance(data, dict):
        inner = data.get("error")
        if isinstance(inner, dict) and "code" in inner:
            return inner
        if "code" in data and "message" in data:
            return data
        status = str(data.get("status", ""))
        if status in NO_RETRY_CODES or status == "failed":
            return {"code": status, "message": data.get("message", ""), "retryable": False}
    if message.status == "error":
        return {"code": "tool_error", "message": str(message.text)[:200], "retryable": False}
    return None


def plan_refund(request: str, lookups: list[tuple[ToolCall, ToolMessage | None]]) -> Plan:
    """Rule 2: refund each looked-up order, or explain why not."""
    before_reason, reason = _split_reason(request)
    explicit = _explicit_amount(before_reason)
    if isinstance(explicit, str):
        return explicit
    amount, currency = explicit
    if amount is not None and len(lookups) > 1:
        return "You gave one amount for several orders; which order should get it?"
    calls: list[tuple[str, dict[str, Any]]] = []
    for call, message in lookups:
        order_id = call["args"].get("order_id", "?")
        if message is None:
            return f"I got no result when looking up {order_id}, so I did not start a refund."
        order = parse_result(message)
        error = error_of(message, order)
        if error is not None or not isinstance(order, dict):
            code = (error or {}).get("code", "unreadable_result")
            return f"Looking up {order_id} failed ({code}), so I did not start a refund."
        order_currency = order.get("currency")
        if currency and order_currency and currency != order_currency:
            return f"{order_id} is in {order_currency}, not {currency}; which did you mean?"
        refund_currency = currency or order_currency
        if not refund_currency:
            return f"Which currency should the refund for {order_id} be in?"
        refund_amount = amount
        if refund_amount is None:
            refund_amount = int(order.get("payable_minor", 0)) - int(order.get("refunded_minor", 0))
            if refund_amount <= 0:
                return f"{order_id} has nothing left to refund, so I did not start a refund."
        args = {
            "order_id": order_id,
            "amount_minor": refund_amount,
            "currency": refund_currency,
            "reason": reason,
        }
        calls.append(("refund_order", args))
    return calls


def _brief(item: Any) -> str:
    if not isinstance(item, dict):
        return str(item)
    ident = item.get("id") or item.get("order_id") or item.get("ticket_id") or "?"
    status = item.get("status")
    return f"{ident} ({status})" if status else str(ident)


def _describe(name: str, message: ToolMessage) -> str:
    data = parse_result(message)
    status = str(data.get("status", "")) if isinstance(data, dict) else ""
    error = error_of(message, data)
    code = str((error or {}).get("code", ""))
    if status in UNKNOWN_OUTCOMES or code in UNKNOWN_OUTCOMES:
        return (
            f"{name}: the outcome is unknown. It is being reconciled and must not be "
            "repeated; check its status later instead."
        )
    if code in UNSETTLED_CODES and "execution_id" in ((error or {}).get("details") or {}):
        return (
            f"{name} is not finished yet ({code}). It is being completed with its own "
            "request key and must not be repeated; I will report the final result."
        )
    if error is not None:
        text = f"{name} was not done ({code}: {error.get('message', '')})."
        if code in NO_RETRY_CODES or not error.get("retryable"):
            return text + " I will not retry it."
        return text + " It is safe to ask for it again."
    if name not in WRITE_TOOLS:
        items = data.get(name.removeprefix("list_"), data) if isinstance(data, dict) else data
        if isinstance(items, list):
            shown = "; ".join(_brief(i) for i in items[:10]) or "nothing found"
            return f"{name} returned {len(items)} item(s): {shown}."
        return f"{name} returned: {json.dumps(data, ensure_ascii=False)[:300]}"
    if status == "succeeded":
        receipt = data.get("receipt") if isinstance(data.get("receipt"), dict) else data
        execution = receipt.get("execution_id") or data.get("execution_id")
        provider_ref = receipt.get("provider_ref") or data.get("provider_ref")
        return f"{name} succeeded: execution {execution}, provider ref {provider_ref}."
    shown = status or json.dumps(data, ensure_ascii=False)[:200]
    return f"{name} returned {shown!r}; it is not confirmed as done."


def report_settled(notes: list[str]) -> str:
    """Rule 0: an earlier write became final since the last turn: say so, start nothing.

    The person may be asking again only because they were never told; they can ask
    once more after hearing the final result.
    """
    return (
        " ".join(notes)
        + " I did not start anything new; ask again if you still want something done."
    )


def summarise(batch: list[ToolCall], results: dict[str, ToolMessage]) -> str:
    """Rule 3: one honest sentence per call in the last batch."""
    lines = []
    for call in batch:
        message = results.get(call["id"] or "")
        if message is None:
            lines.append(f"{call['name']}: no result was recorded, so I cannot say it ran.")
        else:
            lines.append(_describe(call["name"], message))
    return "\n".join(lines)
