"""Refunds: the one demo tool whose effect leaves the building.

A refund runs in three steps. `apply` reserves the amount on the order (guarded by the
version the person saw and by the refundable balance) and records a `pending` refund
row, in the same transaction that consumes the confirmation. `call_downstream` asks
the provider to pay it out under the request key. If the provider refuses for good,
`compensate` releases the reservation and marks the row `reversed`.

Refund row lifecycle: `pending` means reserved here and sent (or being sent) to the
provider; the ledger's execution row is the source of truth for the provider's answer.
`mark_refund_succeeded` moves a row to `succeeded` with the provider reference when a
caller that holds a transaction after a successful call wants the domain row to say so.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Any

from pydantic import Field

from writegate.approval.errors import (
    ClarificationNeeded,
    IdempotencyConflict,
    StateChanged,
    ValidationFailed,
)
from writegate.approval.models import Preview, SideEffect
from writegate.approval.spec import DownstreamResult, ToolContext, Validated
from writegate.tools.money import CURRENCY_CODES, CurrencyCode, describe_currency, format_minor
from writegate.tools.orders import SELECT_ORDER_SQL, OrderId, order_view, own_order
from writegate.tools.provider import ProviderClient
from writegate.tools.registry import StrictArgs, Tool

RESERVE_REFUND_SQL = """
UPDATE orders SET refunded_minor = refunded_minor + %s, version = version + 1
WHERE order_id = %s AND tenant_id = %s AND user_id = %s AND currency = %s AND version = %s
  AND refunded_minor + %s <= payable_minor
RETURNING order_id, currency, payable_minor, refunded_minor, shipping_address, version
"""
# No conflict target: the refund id is derived from the request key, so a conflict on
# either unique column means this very request was recorded already.
INSERT_REFUND_SQL = """
INSERT INTO refunds (refund_id, order_id, tenant_id, amount_minor, currency, reason,
                     request_key, status)
VALUES (%s, %s, %s, %s, %s, %s, %s, 'pending')
ON CONFLICT DO NOTHING
RETURNING refund_id, status
"""
MARK_REFUND_SUCCEEDED_SQL = """
UPDATE refunds SET status = 'succeeded', provider_ref = %s
WHERE request_key = %s AND status = 'pending' RETURNING refund_id
"""
REVERSE_REFUND_SQL = """
UPDATE refunds SET status = 'reversed'
WHERE request_key = %s AND status = 'pending' RETURNING order_id, tenant_id, amount_minor
"""
RELEASE_REFUND_SQL = """
UPDATE orders SET refunded_minor = refunded_minor - %s, version = version + 1
WHERE order_id = %s AND tenant_id = %s AND refunded_minor >= %s
RETURNING order_id
"""

MAX_MINOR = 2**53 - 1  # the largest integer every JSON reader keeps exact


def refund_id_for(request_key: str) -> str:
    """Derived from the request key, so every step can name the refund without a lookup."""
    return "rfd_" + hashlib.sha256(request_key.encode("utf-8")).hexdigest()[:24]


def mark_refund_succeeded(conn: Any, request_key: str, provider_ref: str | None) -> bool:
    """`pending` -> `succeeded` with the provider's reference; False if not pending."""
    row = conn.execute(MARK_REFUND_SUCCEEDED_SQL, (provider_ref, request_key)).fetchone()
    return row is not None


class RefundArgs(StrictArgs):
    order_id: OrderId
    amount_minor: Annotated[
        int,
        Field(
            gt=0,
            le=MAX_MINOR,
            description="Amount in minor units, an integer > 0: ¥199.00 CNY is 19900, "
            "$5.25 USD is 525, ¥500 JPY is 500 (JPY has no decimals).",
        ),
    ]
    currency: Annotated[
        CurrencyCode,
        Field(description="ISO 4217 code; must be the order's own currency."),
    ]
    reason: Annotated[
        str, Field(min_length=1, max_length=500, description="Why, in 1 to 500 characters.")
    ]


class RefundOrder(Tool):
    name = "refund_order"
    description = (
        "Propose refunding all or part of one of the user's orders to the original payment "
        "method. Nothing happens until the user confirms the preview. Call get_order first; "
        "if the amount or currency is unclear, ask the user instead of guessing."
    )
    args_model = RefundArgs
    side_effect = SideEffect.EXTERNAL
    requires_approval = True

    def __init__(self, provider: ProviderClient) -> None:
        self.provider = provider

    def clarify(self, raw: dict[str, Any]) -> None:
        missing = [
            key
            for key in ("amount_minor", "currency")
            if raw.get(key) is None or (isinstance(raw[key], str) and not raw[key].strip())
        ]
        if missing:
            order = raw.get("order_id") or "the order"
            questions = {
                "amount_minor": f"How much should be refunded for {order}?",
                "currency": f"In which currency ({', '.join(CURRENCY_CODES)})?",
            }
            raise ClarificationNeeded(
                "ask the user: " + " ".join(questions[key] for key in missing),
                missing=missing,
                questions=[questions[key] for key in missing],
            )

    def validate(self, ctx: ToolContext, args: dict[str, Any]) -> Validated:
        order = own_order(ctx.conn, ctx.identity, args["order_id"])
        amount, currency = args["amount_minor"], args["currency"]
        if currency != order["currency"]:
            raise ValidationFailed(
                f"{order['order_id']} is in {order['currency']}, not {currency}",
                order_currency=order["currency"],
                requested_currency=currency,
            )
        if amount > order["refundable_minor"]:
            raise ValidationFailed(
                f"refund of {format_minor(amount, currency)} exceeds the refundable "
                f"balance of {order['refundable_display']}",
                amount_minor=amount,
                refundable_minor=order["refundable_minor"],
                payable_minor=order["payable_minor"],
                refunded_minor=order["refunded_minor"],
                currency=currency,
            )
        return Validated(f"order:{order['order_id']}", order["version"], {"order": order})

    def preview(self, args: dict[str, Any], seen: Validated) -> Preview:
        order = seen.facts["order"]
        amount, currency = args["amount_minor"], args["currency"]
        target = f"Order {order['order_id']} (ending {order['order_id'][-4:]})"
        if order.get("shipping_address"):
            target += f", shipped to {order['shipping_address']}"
        shown, after = format_minor(amount, currency), order["refundable_minor"] - amount
        return Preview(
            title=f"Refund order {order['order_id']}",
            operation=self.name,
            target=target,
            fields=[
                {
                    "name": "order_id",
                    "label": "Order",
                    "value": args["order_id"],
                    "display": args["order_id"],
                    "identifies": True,
                },
                {
                    "name": "amount_minor",
                    "label": "Amount",
                    "value": amount,
                    "display": shown,
                    "money_of": "currency",
                },
                {
                    "name": "currency",
                    "label": "Currency",
                    "value": currency,
                    "display": describe_currency(currency),
                    "options": list(CURRENCY_CODES),
                },
                {
                    "name": "reason",
                    "label": "Reason",
                    "value": args["reason"],
                    "display": args["reason"],
                },
            ],
            impact=(
                f"{shown} goes back to the original payment method; "
                f"refundable balance after: {format_minor(after, currency)}"
            ),
            side_effect=self.side_effect,
            irreversible=True,
            external=True,
        )

    def apply(
        self, ctx: ToolContext, args: dict[str, Any], *, expected_version: int, request_key: str
    ) -> dict[str, Any]:
        ident, amount = ctx.identity, args["amount_minor"]
        params = (amount, args["order_id"], ident.tenant_id, ident.user_id, args["currency"],
                  expected_version, amount)  # fmt: skip
        row = ctx.conn.execute(RESERVE_REFUND_SQL, params).fetchone()
        if row is None:
            current = ctx.conn.execute(
                SELECT_ORDER_SQL, (args["order_id"], ident.tenant_id, ident.user_id)
            ).fetchone()
            raise StateChanged(
                order_id=args["order_id"],
                expected_version=expected_version,
                current_version=current["version"] if current else None,
                refundable_minor=order_view(current)["refundable_minor"] if current else None,
            )
        refund_id = refund_id_for(request_key)
        inserted = ctx.conn.execute(
            INSERT_REFUND_SQL,
            (refund_id, args["order_id"], ident.tenant_id, amount, args["currency"],
             args["reason"], request_key),
        ).fetchone()  # fmt: skip
        if inserted is None:
            # Raising rolls back the reservation above with the caller's transaction.
            raise IdempotencyConflict(
                "this refund request was already applied", request_key=request_key
            )
        order = order_view(row)
        return {"refund_id": refund_id, "status": "pending", "order": order}

    @property
    def has_downstream(self) -> bool:
        return True

    def _outcome(self, request_key: str, answer: dict[str, Any]) -> DownstreamResult:
        amount, currency = answer["amount_minor"], answer["currency"]
        return DownstreamResult(
            provider_ref=answer["provider_ref"],
            result={
                "refund_id": refund_id_for(request_key),
                "provider_ref": answer["provider_ref"],
                "order_id": answer["order_id"],
                "amount_minor": amount,
                "currency": currency,
                "amount_display": format_minor(amount, currency),
            },
        )

    def call_downstream(self, args: dict[str, Any], request_key: str) -> DownstreamResult:
        answer = self.provider.refund(
            idempotency_key=request_key,
            order_id=args["order_id"],
            amount_minor=args["amount_minor"],
            currency=args["currency"],
        )
        return self._outcome(request_key, answer)

    def lookup_downstream(self, args: dict[str, Any], request_key: str) -> DownstreamResult | None:
        answer = self.provider.lookup(request_key)
        return self._outcome(request_key, answer) if answer is not None else None

    def on_downstream_success(
        self, ctx: ToolContext, args: dict[str, Any], request_key: str, result: DownstreamResult
    ) -> None:
        mark_refund_succeeded(ctx.conn, request_key, result.provider_ref)

    def compensate(self, ctx: ToolContext, args: dict[str, Any], request_key: str) -> None:
        # Keyed by the server-made request key alone, so a reconciler acting under a
        # service identity undoes the same reservation; a second call finds no pending row.
        row = ctx.conn.execute(REVERSE_REFUND_SQL, (request_key,)).fetchone()
        if row is None:
            return
        amount = row["amount_minor"]
        released = ctx.conn.execute(
            RELEASE_REFUND_SQL, (amount, row["order_id"], row["tenant_id"], amount)
        ).fetchone()
        if released is None:  # the CHECK constraints make this unreachable; say so if not
            raise StateChanged("the refund reservation could not be released", **row)
