"""Tool schemas, argument normalization and previews, without a database."""

from __future__ import annotations

from typing import Any

import pytest

from tests.demo_registry import default_registry
from writegate.approval.errors import ClarificationNeeded, ValidationFailed
from writegate.approval.models import SideEffect
from writegate.approval.money import format_minor
from writegate.approval.spec import Validated
from writegate.tools.registry import Registry, StrictArgs, Tool, strict_schema


class NoProvider:
    def refund(
        self, *, idempotency_key: str, order_id: str, amount_minor: int, currency: str
    ) -> dict[str, Any]:
        raise AssertionError("no provider call in unit tests")

    def lookup(self, idempotency_key: str) -> dict[str, Any] | None:
        raise AssertionError("no provider call in unit tests")

    def applied_since(self, since: Any) -> dict[str, dict[str, Any]]:
        raise AssertionError("no provider call in unit tests")


@pytest.fixture
def registry() -> Registry:
    return default_registry(NoProvider())


REFUND = {"order_id": "ord_1001", "amount_minor": 19900, "currency": "CNY", "reason": "late"}


def _objects(schema: Any, where: str = "$") -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(schema, dict):
        if schema.get("type") == "object" or "properties" in schema:
            found.append((where, schema))
        for key, value in schema.items():
            found += _objects(value, f"{where}.{key}")
    elif isinstance(schema, list):
        for i, value in enumerate(schema):
            found += _objects(value, f"{where}[{i}]")
    return found


def test_registry_has_the_eight_tools(registry: Registry) -> None:
    assert registry.names() == [
        "get_order",
        "list_orders",
        "refund_order",
        "get_ticket",
        "list_tickets",
        "create_ticket",
        "update_ticket",
        "close_tickets",
    ]
    with pytest.raises(KeyError):
        registry.get("delete_everything")


def test_approval_and_side_effects_are_declared(registry: Registry) -> None:
    declared = {s.name: (s.side_effect, s.requires_approval) for s in registry.specs()}
    assert declared == {
        "get_order": (SideEffect.NONE, False),
        "list_orders": (SideEffect.NONE, False),
        "get_ticket": (SideEffect.NONE, False),
        "list_tickets": (SideEffect.NONE, False),
        "refund_order": (SideEffect.EXTERNAL, True),
        "create_ticket": (SideEffect.REVERSIBLE, True),
        "update_ticket": (SideEffect.REVERSIBLE, True),
        "close_tickets": (SideEffect.IRREVERSIBLE, True),
    }
    assert registry.get("refund_order").has_downstream
    assert not registry.get("update_ticket").has_downstream


def test_every_schema_is_strict(registry: Registry) -> None:
    for spec in registry.openai_tools():
        function = spec["function"]
        assert spec["type"] == "function" and function["strict"] is True
        objects = _objects(function["parameters"])
        assert objects, function["name"]
        for where, obj in objects:
            assert obj["additionalProperties"] is False, (function["name"], where)
            assert sorted(obj["required"]) == sorted(obj["properties"]), (function["name"], where)


def test_closed_sets_are_enums(registry: Registry) -> None:
    refund = registry.get("refund_order").json_schema()["properties"]
    assert refund["currency"]["enum"] == ["CNY", "USD", "EUR", "JPY"]
    assert refund["amount_minor"]["type"] == "integer"
    status = registry.get("update_ticket").json_schema()["properties"]["status"]
    assert status["enum"] == ["open", "in_progress", "resolved", "closed"]


def test_normalize_trims_and_returns_canonical_args(registry: Registry) -> None:
    raw = {"order_id": " ord_1001 ", "amount_minor": 19900, "currency": " CNY", "reason": " late "}
    assert registry.get("refund_order").normalize(raw) == REFUND
    assert registry.get("list_orders").normalize({}) == {}


@pytest.mark.parametrize("amount", [199.0, 19900.0, "19900", True, 0, -5, [19900]])
def test_amount_must_be_a_positive_integer(registry: Registry, amount: Any) -> None:
    with pytest.raises(ValidationFailed) as caught:
        registry.get("refund_order").normalize({**REFUND, "amount_minor": amount})
    assert caught.value.details["fields"][0]["field"] == "amount_minor"


def test_extra_keys_are_refused(registry: Registry) -> None:
    with pytest.raises(ValidationFailed, match="user_id"):
        registry.get("refund_order").normalize({**REFUND, "user_id": "user_7"})
    with pytest.raises(ValidationFailed):
        registry.get("list_tickets").normalize({"all_users": True})


@pytest.mark.parametrize(
    ("change", "missing"),
    [
        ({"currency": ""}, ["currency"]),
        ({"currency": None}, ["currency"]),
        ({"currency": "  "}, ["currency"]),
        ({"amount_minor": None}, ["amount_minor"]),
        ({"amount_minor": None, "currency": ""}, ["amount_minor", "currency"]),
    ],
)
def test_missing_amount_or_currency_asks_the_user(
    registry: Registry, change: dict[str, Any], missing: list[str]
) -> None:
    with pytest.raises(ClarificationNeeded) as caught:
        registry.get("refund_order").normalize({**REFUND, **change})
    assert caught.value.details["missing"] == missing


def test_absent_currency_key_asks_the_user(registry: Registry) -> None:
    raw = {k: v for k, v in REFUND.items() if k != "currency"}
    with pytest.raises(ClarificationNeeded, match="currency"):
        registry.get("refund_order").normalize(raw)


@pytest.mark.parametrize("currency", ["cny", "GBP", "RMB"])
def test_unknown_currency_is_invalid(registry: Registry, currency: str) -> None:
    with pytest.raises(ValidationFailed):
        registry.get("refund_order").normalize({**REFUND, "currency": currency})


@pytest.mark.parametrize(
    "args",
    [
        {"ticket_id": "tkt_000001", "status": "done"},
        {"ticket_id": "tkt_000001", "status": "Resolved"},
        {"ticket_id": "tkt_000001"},
        {"ticket_id": "", "status": "open"},
    ],
)
def test_bad_ticket_updates_are_invalid(registry: Registry, args: dict[str, Any]) -> None:
    with pytest.raises(ValidationFailed):
        registry.get("update_ticket").normalize(args)


def test_text_lengths_are_enforced(registry: Registry) -> None:
    create = registry.get("create_ticket")
    assert create.normalize({"title": "VPN", "description": "drops"})["title"] == "VPN"
    for bad in ({"title": " ", "description": "x"}, {"title": "x" * 201, "description": "x"}):
        with pytest.raises(ValidationFailed):
            create.normalize(bad)
    with pytest.raises(ValidationFailed):
        registry.get("refund_order").normalize({**REFUND, "reason": "x" * 501})


@pytest.mark.parametrize(
    ("amount", "currency", "shown"),
    [
        (19900, "CNY", "¥199.00"),
        (525, "USD", "$5.25"),
        (5, "EUR", "€0.05"),
        (19900, "JPY", "¥19,900"),
        (123456789, "USD", "$1,234,567.89"),
        (0, "CNY", "¥0.00"),
    ],
)
def test_format_minor(amount: int, currency: str, shown: str) -> None:
    assert format_minor(amount, currency) == shown


def _order(currency: str, payable: int, refunded: int = 0, address: str = "") -> Validated:
    order = {
        "order_id": "ord_1001",
        "currency": currency,
        "payable_minor": payable,
        "refunded_minor": refunded,
        "refundable_minor": payable - refunded,
        "shipping_address": address,
        "version": 3,
    }
    return Validated("order:ord_1001", 3, {"order": order})


def test_refund_preview_shows_machine_and_display_values(registry: Registry) -> None:
    preview = registry.get("refund_order").preview(
        REFUND, _order("CNY", 19900, address="杭州云栖路 88 号")
    )
    fields = {f["name"]: f for f in preview.fields}
    assert fields["amount_minor"]["value"] == 19900
    assert fields["amount_minor"]["display"] == "¥199.00"
    assert fields["currency"]["value"] == "CNY"
    assert fields["reason"]["value"] == "late"
    assert preview.title == "Refund order ord_1001"
    assert "1001" in preview.target and "杭州云栖路 88 号" in preview.target
    assert "¥199.00" in preview.impact and "¥0.00" in preview.impact
    assert preview.irreversible and preview.external
    assert preview.side_effect is SideEffect.EXTERNAL


def test_jpy_preview_has_no_decimals(registry: Registry) -> None:
    args = {**REFUND, "amount_minor": 1500, "currency": "JPY"}
    preview = registry.get("refund_order").preview(args, _order("JPY", 4000, refunded=500))
    fields = {f["name"]: f for f in preview.fields}
    assert fields["amount_minor"]["display"] == "¥1,500"
    assert "¥2,000" in preview.impact


def test_ticket_preview_shows_the_change(registry: Registry) -> None:
    ticket = {"ticket_id": "tkt_000001", "title": "VPN connection fails", "status": "open"}
    seen = Validated("ticket:tkt_000001", 1, {"ticket": ticket})
    preview = registry.get("update_ticket").preview(
        {"ticket_id": "tkt_000001", "status": "in_progress"}, seen
    )
    status = next(f for f in preview.fields if f["name"] == "status")
    assert status["value"] == "in_progress"
    assert "In progress" in status["display"] and "Open" in preview.impact
    assert not preview.irreversible and not preview.external


def test_read_tools_refuse_to_write(registry: Registry) -> None:
    with pytest.raises(ValidationFailed):
        registry.get("get_order").apply(None, {}, expected_version=1, request_key="k")  # type: ignore[arg-type]
    with pytest.raises(ValidationFailed):
        registry.get("list_tickets").call_downstream({}, "k")


def test_a_tool_must_declare_its_approval() -> None:
    class Args(StrictArgs):
        pass

    with pytest.raises(TypeError, match="requires_approval"):

        class Sneaky(Tool):
            name = "sneaky"
            description = "inherits its approval answer"
            args_model = Args
            side_effect = SideEffect.REVERSIBLE

    class Unconfirmed(Tool):
        name = "unconfirmed"
        description = "a write that skips approval"
        args_model = Args
        side_effect = SideEffect.REVERSIBLE
        requires_approval = False

    with pytest.raises(ValueError, match="requires_approval"):
        Registry([Unconfirmed()])


def test_strict_schema_of_an_empty_model() -> None:
    class Empty(StrictArgs):
        pass

    schema = strict_schema(Empty)
    assert schema == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }


def test_every_argument_field_is_in_the_exported_schema():
    # A field named like a JSON-schema keyword ("title") must not be dropped.
    for spec in default_registry(None).specs():  # type: ignore[arg-type]
        schema = spec.json_schema()
        fields = set(spec.args_model.model_fields)  # type: ignore[attr-defined]
        assert set(schema["properties"]) == fields == set(schema["required"]), spec.name
