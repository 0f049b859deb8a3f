"""`refund_order`: the one demo tool whose effect leaves the building.

Declared with the public `write_tool`, like anyone's tool; the payment provider is its
downstream. A refund runs in three steps. `prepare` reserves the amount on the order
(guarded by the version the person saw and by the refundable balance) and records a
`pending` refund row, in the same transaction that consumes the confirmation. The tool's
function asks the provider to pay it out under the request key. If the provider refuses
for good, `compensate` releases the reservation and marks the row `reversed`; once it
succeeded (answered, or found later by `lookup`), `on_success` marks the row `succeeded`
with the provider's reference.

Refund row lifecycle: `pending` means reserved here and sent (or being sent) to the
provider; the ledger's execution row is the source of truth for the provider's answer.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Any

from pydantic import Field

from writegate import (
    Checked,
    GuardedTool,
    IdempotencyConflict,
    Identity,
    PreviewField,
    StateChanged,
    ToolPreview,
    ValidationFailed,
    describe_currency,
    format_minor,
    write_tool,
)
from writegate.demo.money import CURRENCY_CODES, CurrencyCode
from writegate.demo.orders import SELECT_ORDER_SQL, OrderId, order_view, own_order
from writegate.demo.provider import ProviderClient

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


Amount = Annotated[
    int,
    Field(
        gt=0,
        le=MAX_MINOR,
        description="Amount in minor units, an integer > 0: ¥199.00 CNY is 19900, "
        "$5.25 USD is 525, ¥500 JPY is 500 (JPY has no decimals).",
    ),
]
Currency = Annotated[
    CurrencyCode,
    Field(description="ISO 4217 code; must be the order's own currency."),
]
Reason = Annotated[
    str, Field(min_length=1, max_length=500, description="Why, in 1 to 500 characters.")
]


def _ask(raw: dict[str, Any]) -> dict[str, str]:
    """The amount and the currency are the user's to say, never the model's to guess."""
    missing = [
        key
        for key in ("amount_minor", "currency")
        if raw.get(key) is None or (isinstance(raw[key], str) and not raw[key].strip())
    ]
    order = raw.get("order_id") or "the order"
    questions = {
        "amount_minor": f"How much should be refunded for {order}?",
        "currency": f"In which currency ({', '.join(CURRENCY_CODES)})?",
    }
    return {key: questions[key] for key in missing}


def _moved(args: dict[str, Any], expected: int, now: dict[str, Any] | None) -> StateChanged:
    return StateChanged(
        order_id=args["order_id"],
        expected_version=expected,
        current_version=now["version"] if now else None,
        refundable_minor=now["refundable_minor"] if now else None,
    )


def _check(
    args: dict[str, Any], identity: Identity, *, conn: Any, expected_version: int | None
) -> Checked:
    if expected_version is not None:
        # Executing: nothing to read. The reservation's one guarded statement, in this
        # same transaction, checks the owner, the version the person saw and the
        # balance, and reads the order only to explain a mismatch.
        return Checked(expected_version)
    order = own_order(conn, identity, args["order_id"])
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
    return Checked(order["version"], {"order": order})


def _preview(args: dict[str, Any], *, facts: dict[str, Any]) -> ToolPreview:
    order = facts["order"]
    amount, currency = args["amount_minor"], args["currency"]
    target = f"Order {order['order_id']} (ending {order['order_id'][-4:]})"
    if order.get("shipping_address"):
        target += f", shipped to {order['shipping_address']}"
    shown, after = format_minor(amount, currency), order["refundable_minor"] - amount
    return ToolPreview(
        title=f"Refund order {order['order_id']}",
        target=target,
        fields=[
            PreviewField("order_id", args["order_id"], label="Order", identifies=True),
            PreviewField("amount_minor", amount, shown, label="Amount", money_of="currency"),
            PreviewField(
                "currency",
                currency,
                describe_currency(currency),
                label="Currency",
                options=CURRENCY_CODES,
            ),
            PreviewField("reason", args["reason"], label="Reason"),
        ],
        impact=(
            f"{shown} goes back to the original payment method; "
            f"refundable balance after: {format_minor(after, currency)}"
        ),
    )


def _reserve(
    args: dict[str, Any],
    *,
    conn: Any,
    identity: Identity,
    expected_version: int,
    request_key: str,
) -> dict[str, Any]:
    amount = args["amount_minor"]
    params = (amount, args["order_id"], identity.tenant_id, identity.user_id, args["currency"],
              expected_version, amount)  # fmt: skip
    row = conn.execute(RESERVE_REFUND_SQL, params).fetchone()
    if row is None:
        current = conn.execute(
            SELECT_ORDER_SQL, (args["order_id"], identity.tenant_id, identity.user_id)
        ).fetchone()
        raise _moved(args, expected_version, order_view(current) if current else None)
    refund_id = refund_id_for(request_key)
    inserted = conn.execute(
        INSERT_REFUND_SQL,
        (refund_id, args["order_id"], identity.tenant_id, amount, args["currency"],
         args["reason"], request_key),
    ).fetchone()  # fmt: skip
    if inserted is None:
        # Raising rolls back the reservation above with the caller's transaction.
        raise IdempotencyConflict(
            "this refund request was already applied", request_key=request_key
        )
    return {"refund_id": refund_id, "status": "pending", "order": order_view(row)}


def _succeeded(
    args: dict[str, Any], result: dict[str, Any], *, conn: Any, request_key: str
) -> None:
    mark_refund_succeeded(conn, request_key, result.get("provider_ref"))


def _release(args: dict[str, Any], *, conn: Any, request_key: str) -> None:
    # Keyed by the server-made request key alone, so a reconciler acting under a
    # service identity undoes the same reservation; a second call finds no pending row.
    row = conn.execute(REVERSE_REFUND_SQL, (request_key,)).fetchone()
    if row is None:
        return
    amount = row["amount_minor"]
    released = conn.execute(
        RELEASE_REFUND_SQL, (amount, row["order_id"], row["tenant_id"], amount)
    ).fetchone()
    if released is None:  # the CHECK constraints make this unreachable; say so if not
        raise StateChanged("the refund reservation could not be released", **row)


def _outcome(request_key: str, answer: dict[str, Any]) -> dict[str, Any]:
    amount, currency = answer["amount_minor"], answer["currency"]
    return {
        "refund_id": refund_id_for(request_key),
        "provider_ref": answer["provider_ref"],
        "order_id": answer["order_id"],
        "amount_minor": amount,
        "currency": currency,
        "amount_display": format_minor(amount, currency),
    }


def refund_order_tool(provider: ProviderClient) -> GuardedTool:
    """`refund_order`, paying out through `provider`."""

    def lookup(args: dict[str, Any], request_key: str) -> dict[str, Any] | None:
        answer = provider.lookup(request_key)
        return _outcome(request_key, answer) if answer is not None else None

    @write_tool(
        side_effect="external",
        resource=lambda args: f"order:{args['order_id']}",
        clarify=_ask,
        validate=_check,
        preview=_preview,
        prepare=_reserve,
        on_success=_succeeded,
        compensate=_release,
        lookup=lookup,
        applied_since=lambda since: provider.applied_since(since),  # after a failover
        dedupes_by_key=True,  # the provider applies an idempotency key once
    )
    def refund_order(
        order_id: OrderId,
        amount_minor: Amount,
        currency: Currency,
        reason: Reason,
        *,
        request_key: str,
    ) -> dict[str, Any]:
        """Propose refunding all or part of one of the user's orders to the original
        payment method. Nothing happens until the user confirms the preview. Call
        get_order first; if the amount or currency is unclear, ask the user instead of
        guessing."""
        answer = provider.refund(
            idempotency_key=request_key,
            order_id=order_id,
            amount_minor=amount_minor,
            currency=currency,
        )
        return _outcome(request_key, answer)

    tool: GuardedTool = refund_order
    return tool
