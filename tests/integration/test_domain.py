"""The domain tools and the provider simulator on a real PostgreSQL.

Every test makes its own tenant, orders and tickets, so the tests share one database
without seeing each other's rows.
"""

from __future__ import annotations

import re
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.demo_registry import default_registry
from writegate.approval.errors import (
    IdempotencyConflict,
    InvalidTransition,
    NotFound,
    StateChanged,
    Unprotected,
    ValidationFailed,
)
from writegate.approval.models import Identity
from writegate.approval.spec import ToolContext, acting_for
from writegate.checkpoints.pool import Pool
from writegate.demo.provider import SimulatedProvider
from writegate.demo.refunds import mark_refund_succeeded
from writegate.demo.seed import DEMO_TENANT, reset_demo, seed_demo
from writegate.tools.registry import Registry

INSERT_ORDER = """
INSERT INTO orders (order_id, tenant_id, user_id, currency, payable_minor, refunded_minor,
                    shipping_address, version)
VALUES (%s, %s, %s, %s, %s, %s, '', %s)
"""
INSERT_TICKET = """
INSERT INTO tickets (ticket_id, tenant_id, user_id, title, description, status, version)
VALUES (%s, %s, %s, 'VPN connection fails', 'drops after a minute', %s, %s)
"""
SELECT_ORDER = "SELECT refunded_minor, version FROM orders WHERE order_id = %s"
SELECT_REFUNDS = "SELECT status, amount_minor, request_key FROM refunds WHERE order_id = %s"
SELECT_TICKET = "SELECT status, version FROM tickets WHERE ticket_id = %s"
COUNT_TICKETS_BY_KEY = "SELECT count(*) AS n FROM tickets WHERE request_key = %s"
COUNT_PROVIDER_ROWS = "SELECT count(*) AS n FROM provider.refunds WHERE idempotency_key = %s"


def _id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(5)}"


@pytest.fixture
def provider(pool: Pool) -> SimulatedProvider:
    return SimulatedProvider(pool=pool)


@pytest.fixture
def registry(provider: SimulatedProvider) -> Registry:
    return default_registry(provider)


@pytest.fixture
def alice() -> Identity:
    return Identity(user_id="alice", tenant_id=_id("tenant"))


@contextmanager
def tx(pool: Pool, who: Identity) -> Iterator[ToolContext]:
    with pool.connection() as conn, conn.transaction():
        yield ToolContext(who, conn, "thread_test")


def make_order(
    pool: Pool, owner: Identity, *, currency: str = "CNY", payable: int = 19900, refunded: int = 0
) -> str:
    order_id = _id("ord")
    with pool.connection() as conn:
        conn.execute(
            INSERT_ORDER,
            (order_id, owner.tenant_id, owner.user_id, currency, payable, refunded, 1),
        )
    return order_id


CLOSE_TICKET = "UPDATE tickets SET status = 'closed', version = version + 1 WHERE ticket_id = %s"


def make_ticket(pool: Pool, owner: Identity, status: str = "open") -> str:
    ticket_id = _id("tkt")
    with pool.connection() as conn:
        conn.execute(INSERT_TICKET, (ticket_id, owner.tenant_id, owner.user_id, status, 1))
    return ticket_id


def fetch(pool: Pool, sql: str, *params: Any) -> list[dict[str, Any]]:
    with pool.connection() as conn:
        return conn.execute(sql, params).fetchall()


def refund_args(order_id: str, amount: int = 19900, currency: str = "CNY") -> dict[str, Any]:
    return {"order_id": order_id, "amount_minor": amount, "currency": currency, "reason": "late"}


# -- orders and refunds -----------------------------------------------------------------


def test_get_order_reads_only_the_callers_orders(
    pool: Pool, registry: Registry, alice: Identity
) -> None:
    order_id = make_order(pool, alice, payable=19900, refunded=4900)
    with tx(pool, alice) as ctx:
        order = registry.get("get_order").read(ctx, {"order_id": order_id})
        listed = registry.get("list_orders").read(ctx, {})
    assert order["refundable_minor"] == 15000 and order["refundable_display"] == "¥150.00"
    assert order["version"] == 1 and order["currency"] == "CNY"
    assert [o["order_id"] for o in listed["orders"]] == [order_id]
    for stranger in (
        Identity(user_id="mallory", tenant_id=alice.tenant_id),
        Identity(user_id=alice.user_id, tenant_id=_id("tenant")),
    ):
        with tx(pool, stranger) as ctx, pytest.raises(NotFound):
            registry.get("get_order").read(ctx, {"order_id": order_id})


def test_validate_refuses_another_users_order(
    pool: Pool, registry: Registry, alice: Identity
) -> None:
    order_id = make_order(pool, alice)
    bob = Identity(user_id="bob", tenant_id=alice.tenant_id)
    with tx(pool, bob) as ctx, pytest.raises(NotFound):
        registry.get("refund_order").validate(ctx, refund_args(order_id))


def test_validate_refuses_over_refund_and_wrong_currency(
    pool: Pool, registry: Registry, alice: Identity
) -> None:
    order_id = make_order(pool, alice, payable=19900, refunded=10000)
    spec = registry.get("refund_order")
    with tx(pool, alice) as ctx:
        with pytest.raises(ValidationFailed) as over:
            spec.validate(ctx, refund_args(order_id, amount=9901))
        with pytest.raises(ValidationFailed) as currency:
            spec.validate(ctx, refund_args(order_id, amount=100, currency="USD"))
        seen = spec.validate(ctx, refund_args(order_id, amount=9900))
    assert over.value.details["refundable_minor"] == 9900
    assert over.value.details["amount_minor"] == 9901
    assert currency.value.details["order_currency"] == "CNY"
    assert (seen.resource, seen.state_version) == (f"order:{order_id}", 1)


def test_refund_apply_reserves_and_compensate_releases(
    pool: Pool, registry: Registry, alice: Identity
) -> None:
    order_id = make_order(pool, alice, payable=19900)
    spec, key = registry.get("refund_order"), _id("key")
    with tx(pool, alice) as ctx:
        result = spec.apply(ctx, refund_args(order_id, 5000), expected_version=1, request_key=key)
    assert result["status"] == "pending" and result["order"]["refundable_minor"] == 14900
    assert fetch(pool, SELECT_ORDER, order_id) == [{"refunded_minor": 5000, "version": 2}]
    assert fetch(pool, SELECT_REFUNDS, order_id)[0]["status"] == "pending"
    for _ in range(2):  # a second compensation finds nothing pending and changes nothing
        with tx(pool, alice) as ctx:
            spec.compensate(ctx, refund_args(order_id, 5000), key)
    assert fetch(pool, SELECT_ORDER, order_id) == [{"refunded_minor": 0, "version": 3}]
    assert fetch(pool, SELECT_REFUNDS, order_id)[0]["status"] == "reversed"


def test_a_succeeded_refund_is_not_compensated(
    pool: Pool, registry: Registry, alice: Identity
) -> None:
    order_id = make_order(pool, alice)
    spec, key = registry.get("refund_order"), _id("key")
    with tx(pool, alice) as ctx:
        spec.apply(ctx, refund_args(order_id, 700), expected_version=1, request_key=key)
    with pool.connection() as conn, conn.transaction():
        assert mark_refund_succeeded(conn, key, "re_test")
        assert not mark_refund_succeeded(conn, key, "re_test")
    with tx(pool, alice) as ctx:
        spec.compensate(ctx, refund_args(order_id, 700), key)
    assert fetch(pool, SELECT_ORDER, order_id) == [{"refunded_minor": 700, "version": 2}]
    assert fetch(pool, SELECT_REFUNDS, order_id)[0]["status"] == "succeeded"


def test_apply_with_a_stale_version_writes_nothing(
    pool: Pool, registry: Registry, alice: Identity
) -> None:
    order_id = make_order(pool, alice)
    spec = registry.get("refund_order")
    with pytest.raises(StateChanged) as caught, tx(pool, alice) as ctx:
        spec.apply(ctx, refund_args(order_id, 100), expected_version=0, request_key=_id("key"))
    assert caught.value.details["current_version"] == 1
    assert fetch(pool, SELECT_ORDER, order_id) == [{"refunded_minor": 0, "version": 1}]
    assert fetch(pool, SELECT_REFUNDS, order_id) == []


def test_apply_rechecks_the_balance(pool: Pool, registry: Registry, alice: Identity) -> None:
    order_id = make_order(pool, alice, payable=1000, refunded=900)
    with pytest.raises(StateChanged), tx(pool, alice) as ctx:
        registry.get("refund_order").apply(
            ctx, refund_args(order_id, 101), expected_version=1, request_key=_id("key")
        )
    assert fetch(pool, SELECT_ORDER, order_id) == [{"refunded_minor": 900, "version": 1}]


def test_refund_request_key_applies_once(pool: Pool, registry: Registry, alice: Identity) -> None:
    order_id = make_order(pool, alice)
    spec, key = registry.get("refund_order"), _id("key")
    with tx(pool, alice) as ctx:
        spec.apply(ctx, refund_args(order_id, 100), expected_version=1, request_key=key)
    with pytest.raises(IdempotencyConflict), tx(pool, alice) as ctx:
        spec.apply(ctx, refund_args(order_id, 100), expected_version=2, request_key=key)
    assert fetch(pool, SELECT_ORDER, order_id) == [{"refunded_minor": 100, "version": 2}]
    assert len(fetch(pool, SELECT_REFUNDS, order_id)) == 1


def test_refund_downstream_and_lookup(
    pool: Pool, registry: Registry, provider: SimulatedProvider, alice: Identity
) -> None:
    order_id = make_order(pool, alice)
    spec, key = registry.get("refund_order"), _id("key")
    assert spec.lookup_downstream(refund_args(order_id), key) is None
    with pytest.raises(Unprotected):  # only the executor and the reconciler call it
        spec.call_downstream(refund_args(order_id), key)
    assert provider.count_refunds(order_id) == 0
    with acting_for(alice):
        first = spec.call_downstream(refund_args(order_id), key)
        again = spec.call_downstream(refund_args(order_id), key)
    found = spec.lookup_downstream(refund_args(order_id), key)
    assert first.provider_ref and first.provider_ref.startswith("re_")
    assert again == first and found == first
    assert first.result["amount_minor"] == 19900 and first.result["amount_display"] == "¥199.00"
    assert provider.count_refunds(order_id) == 1


# -- provider ---------------------------------------------------------------------------


def test_provider_same_key_same_request_is_one_refund(provider: SimulatedProvider) -> None:
    key, order_id = _id("key"), _id("ord")
    call: dict[str, Any] = {
        "idempotency_key": key,
        "order_id": order_id,
        "amount_minor": 500,
        "currency": "USD",
    }
    first, second = provider.refund(**call), provider.refund(**call)
    assert first == second
    assert provider.count_refunds(order_id) == 1
    assert provider.lookup(key) == first
    assert provider.lookup(_id("key")) is None


def test_provider_refuses_a_reused_key(provider: SimulatedProvider) -> None:
    key, order_id = _id("key"), _id("ord")
    provider.refund(idempotency_key=key, order_id=order_id, amount_minor=500, currency="USD")
    with pytest.raises(ValidationFailed) as caught:
        provider.refund(idempotency_key=key, order_id=order_id, amount_minor=600, currency="USD")
    assert caught.value.details["reason"] == "idempotency key reused"
    assert provider.count_refunds(order_id) == 1


def test_provider_race_on_one_key_makes_one_row(pool: Pool, database_url: str) -> None:
    key, order_id, n = _id("key"), _id("ord"), 8
    barrier, results, errors = threading.Barrier(n), [], []

    def worker() -> None:
        # Its own provider and connection, as eight separate processes would have.
        provider = SimulatedProvider(database_url)
        barrier.wait()
        try:
            results.append(
                provider.refund(
                    idempotency_key=key, order_id=order_id, amount_minor=700, currency="EUR"
                )
            )
        except Exception as exc:  # collected so the assertion shows it
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert len(results) == n and len({r["provider_ref"] for r in results}) == 1
    assert SimulatedProvider(database_url).count_refunds(order_id) == 1
    assert fetch(pool, COUNT_PROVIDER_ROWS, key) == [{"n": 1}]


# -- tickets ----------------------------------------------------------------------------


def test_ticket_reads_are_scoped(pool: Pool, registry: Registry, alice: Identity) -> None:
    ticket_id = make_ticket(pool, alice)
    with tx(pool, alice) as ctx:
        ticket = registry.get("get_ticket").read(ctx, {"ticket_id": ticket_id})
        listed = registry.get("list_tickets").read(ctx, {})
    assert ticket["status"] == "open" and ticket["allowed_next"] == ["in_progress", "resolved"]
    assert [t["ticket_id"] for t in listed["tickets"]] == [ticket_id]
    bob = Identity(user_id="bob", tenant_id=alice.tenant_id)
    with tx(pool, bob) as ctx, pytest.raises(NotFound):
        registry.get("get_ticket").read(ctx, {"ticket_id": ticket_id})


@pytest.mark.parametrize(
    ("current", "new"),
    [("open", "open"), ("open", "closed"), ("closed", "open"), ("in_progress", "closed")],
)
def test_update_ticket_refuses_invalid_transitions(
    pool: Pool, registry: Registry, alice: Identity, current: str, new: str
) -> None:
    ticket_id = make_ticket(pool, alice, status=current)
    spec, args = registry.get("update_ticket"), {"ticket_id": ticket_id, "status": new}
    with tx(pool, alice) as ctx, pytest.raises(InvalidTransition) as at_propose:
        spec.validate(ctx, args)
    assert at_propose.value.details["current"] == current
    assert "allowed_next" in at_propose.value.details
    # apply checks again, even when the version it is given is the current one
    with pytest.raises(InvalidTransition), tx(pool, alice) as ctx:
        spec.apply(ctx, args, expected_version=1, request_key=_id("key"))
    assert fetch(pool, SELECT_TICKET, ticket_id) == [{"status": current, "version": 1}]


def test_update_ticket_apply_is_guarded_by_version(
    pool: Pool, registry: Registry, alice: Identity
) -> None:
    ticket_id = make_ticket(pool, alice)
    spec, args = registry.get("update_ticket"), {"ticket_id": ticket_id, "status": "in_progress"}
    with tx(pool, alice) as ctx:
        seen = spec.validate(ctx, args)
    assert (seen.resource, seen.state_version) == (f"ticket:{ticket_id}", 1)
    with tx(pool, alice) as ctx:
        done = spec.apply(ctx, args, expected_version=1, request_key=_id("key"))
    assert done["ticket"]["status"] == "in_progress" and done["ticket"]["version"] == 2
    resolve = {"ticket_id": ticket_id, "status": "resolved"}
    with pytest.raises(StateChanged), tx(pool, alice) as ctx:
        spec.apply(ctx, resolve, expected_version=1, request_key=_id("key"))
    assert fetch(pool, SELECT_TICKET, ticket_id) == [{"status": "in_progress", "version": 2}]


def test_update_ticket_reports_a_moved_version_before_the_transition_it_now_breaks(
    pool: Pool, registry: Registry, alice: Identity
) -> None:
    ticket_id = make_ticket(pool, alice)
    with pool.connection() as conn:  # closed meanwhile: version 2, and in_progress no longer
        conn.execute(CLOSE_TICKET, (ticket_id,))
    args = {"ticket_id": ticket_id, "status": "in_progress"}
    with pytest.raises(StateChanged), tx(pool, alice) as ctx:
        registry.get("update_ticket").apply(ctx, args, expected_version=1, request_key=_id("k"))
    assert fetch(pool, SELECT_TICKET, ticket_id) == [{"status": "closed", "version": 2}]


def test_create_ticket_applies_once_per_request_key(
    pool: Pool, registry: Registry, alice: Identity
) -> None:
    spec, key = registry.get("create_ticket"), _id("key")
    args = spec.normalize({"title": " Printer jam ", "description": "Tray 2 jams."})
    with tx(pool, alice) as ctx:
        seen = spec.validate(ctx, args)
        created = spec.apply(ctx, args, expected_version=seen.state_version, request_key=key)
    assert (seen.resource, seen.state_version) == ("tickets:new", 0)
    assert re.fullmatch(r"tkt_\d{6,}", created["ticket"]["ticket_id"])
    assert created["ticket"]["title"] == "Printer jam" and created["ticket"]["status"] == "open"
    with pytest.raises(IdempotencyConflict) as caught, tx(pool, alice) as ctx:
        spec.apply(ctx, args, expected_version=0, request_key=key)
    assert caught.value.details["ticket_id"] == created["ticket"]["ticket_id"]
    assert fetch(pool, COUNT_TICKETS_BY_KEY, key) == [{"n": 1}]


# -- seed -------------------------------------------------------------------------------


def test_seed_is_idempotent_and_reset_restores_it(pool: Pool, registry: Registry) -> None:
    user_42 = Identity(user_id="user_42", tenant_id=DEMO_TENANT)
    with pool.connection() as conn:
        seed_demo(conn)
        seed_demo(conn)
    with tx(pool, user_42) as ctx:
        order = registry.get("get_order").read(ctx, {"order_id": "ord_1001"})
        orders = registry.get("list_orders").read(ctx, {})["orders"]
        tickets = registry.get("list_tickets").read(ctx, {})["tickets"]
        with pytest.raises(NotFound):
            registry.get("get_order").read(ctx, {"order_id": "ord_2002"})
    assert order["payable_minor"] == 19900 and order["currency"] == "CNY"
    assert {o["order_id"] for o in orders} == {"ord_1001", "ord_1002"}
    assert {t["ticket_id"] for t in tickets} >= {"tkt_000001", "tkt_000002"}
    with pool.connection() as conn:
        reset_demo(conn)
        seed_demo(conn)
    with tx(pool, user_42) as ctx:
        order = registry.get("get_order").read(ctx, {"order_id": "ord_1001"})
    assert (order["refunded_minor"], order["version"]) == (0, 1)
