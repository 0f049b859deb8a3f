"""The demo domain's tables: its own migration list, applied only by the demo commands
(`writegate demo`, `chat`, `db seed` / `reset`, `serve`), the tests and the bench;
never by `Writegate.open()`.

`orders`, `refunds` and `tickets` stand for an application's own tables, in its own
schema (`public`), as a user's would be; the `provider` schema is the payment provider
simulator's store, kept apart as a real provider's would be; `batch_items` records each
item of a batch close. The position in `MIGRATIONS` is the version, recorded in
`public.writegate_demo_migrations`; append, never edit. A database set up before
writegate's schema (whose core `checkpoints/schema.py` adopted) already has these
tables, so they are adopted as version 1 as they are.
"""

from __future__ import annotations

from writegate import MigrationList, apply_migrations, setup_database

MIGRATIONS: list[str] = [
    # 1. orders and refunds, tickets, the provider simulator's store, batch items
    """
CREATE TABLE orders (
    order_id        text PRIMARY KEY,
    tenant_id       text NOT NULL,
    user_id         text NOT NULL,
    currency        text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    payable_minor   bigint NOT NULL CHECK (payable_minor >= 0),
    refunded_minor  bigint NOT NULL DEFAULT 0 CHECK (refunded_minor >= 0),
    shipping_address text NOT NULL DEFAULT '',
    version         bigint NOT NULL DEFAULT 1,
    created_at      timestamptz NOT NULL DEFAULT now(),
    CHECK (refunded_minor <= payable_minor)
);
CREATE INDEX orders_owner_idx ON orders (tenant_id, user_id);

CREATE TABLE refunds (
    refund_id       text PRIMARY KEY,
    order_id        text NOT NULL REFERENCES orders (order_id),
    tenant_id       text NOT NULL,
    amount_minor    bigint NOT NULL CHECK (amount_minor > 0),
    currency        text NOT NULL,
    reason          text NOT NULL,
    request_key     text NOT NULL UNIQUE,
    status          text NOT NULL CHECK (status IN ('pending', 'succeeded', 'reversed')),
    provider_ref    text,
    created_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE tickets (
    ticket_id       text PRIMARY KEY,
    tenant_id       text NOT NULL,
    user_id         text NOT NULL,
    title           text NOT NULL,
    description     text NOT NULL,
    status          text NOT NULL CHECK (status IN ('open', 'in_progress', 'resolved',
                        'closed')),
    request_key     text UNIQUE,
    version         bigint NOT NULL DEFAULT 1,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX tickets_owner_idx ON tickets (tenant_id, user_id);
CREATE SEQUENCE ticket_number_seq START 1000;

CREATE SCHEMA provider;
-- The simulator's idempotency store: one row per key, so a key never refunds twice.
CREATE TABLE provider.refunds (
    idempotency_key text PRIMARY KEY,
    provider_ref    text NOT NULL UNIQUE,
    order_id        text NOT NULL,
    amount_minor    bigint NOT NULL,
    currency        text NOT NULL,
    request_digest  text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE batch_items (
    request_key        text PRIMARY KEY,
    batch_request_key  text NOT NULL,
    tenant_id          text NOT NULL,
    item               text NOT NULL,
    status             text NOT NULL CHECK (status IN ('succeeded', 'failed')),
    result             jsonb NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    UNIQUE (batch_request_key, item)
);
""",
]

DEMO = MigrationList(
    name="demo",
    table="public.writegate_demo_migrations",
    migrations=MIGRATIONS,
    # The old list made these very tables: adopting them changes nothing.
    legacy=("writegate.legacy_migrations", "SELECT 1"),
)


def setup_demo(url: str) -> None:
    """writegate's tables and the demo's (both idempotent, safe from many processes).
    Here, beside the demo's list, so that setting a database up loads no agent."""
    setup_database(url)
    apply_migrations(url, DEMO)
