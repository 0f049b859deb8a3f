"""The HTTP service's and the MCP server's own tables: API keys (their hashes only),
thread ownership, the answer each click's idempotency key got, and a turn's stream
events for a client that reconnects. Their own migration list, applied by `writegate
serve`, `writegate mcp` and `writegate keys`, never by `Writegate.open()`; recorded in
`writegate.service_migrations`. Append, never edit. A database set up before writegate's
schema has these tables in `public`; they are moved into the schema as version 1, their
constraints and indexes named as a fresh database names them.
"""

from __future__ import annotations

from writegate.checkpoints.migrate import MigrationList, renamed_as_fresh

MIGRATIONS: list[str] = [
    # 1. API keys, HTTP threads and clicks, stream events
    """
CREATE TABLE writegate.api_keys (
    key_hash    text PRIMARY KEY,
    key_id      text NOT NULL UNIQUE,
    user_id     text NOT NULL,
    tenant_id   text NOT NULL,
    roles       text[] NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);

CREATE TABLE writegate.http_threads (
    thread_id   text PRIMARY KEY,
    tenant_id   text NOT NULL,
    user_id     text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX http_threads_owner_idx ON writegate.http_threads (tenant_id, user_id, created_at);

CREATE TABLE writegate.http_clicks (
    tenant_id        text NOT NULL,
    user_id          text NOT NULL,
    idempotency_key  text NOT NULL,
    proposal_id      text NOT NULL,
    request_digest   text NOT NULL,
    status_code      integer,
    response         jsonb,
    created_at       timestamptz NOT NULL DEFAULT now(),
    completed_at     timestamptz,
    PRIMARY KEY (tenant_id, user_id, idempotency_key)
);

CREATE TABLE writegate.stream_events (
    stream_id   text NOT NULL,
    seq         integer NOT NULL CHECK (seq >= 0),
    thread_id   text NOT NULL,
    event       text NOT NULL,
    data        jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (stream_id, seq)
);
CREATE INDEX stream_events_age_idx ON writegate.stream_events (created_at);
""",
    # 2. A thread's lease: the serialization of its runs outlives the lock's session
    """
CREATE TABLE writegate.thread_leases (
    thread_id   text PRIMARY KEY,
    generation  bigint NOT NULL,
    expires_at  timestamptz NOT NULL
);
""",
    # 3. a user's threads a page at a time, by a key that never changes (docs/paging.md).
    # An index only: a process of the previous release ignores it.
    """
CREATE INDEX http_threads_page_idx
    ON writegate.http_threads (tenant_id, user_id, created_at, thread_id);
""",
]

LEGACY_ADOPTION = """
ALTER TABLE public.wg_api_keys SET SCHEMA writegate;
ALTER TABLE writegate.wg_api_keys RENAME TO api_keys;
ALTER TABLE public.wg_http_threads SET SCHEMA writegate;
ALTER TABLE writegate.wg_http_threads RENAME TO http_threads;
ALTER TABLE public.wg_http_clicks SET SCHEMA writegate;
ALTER TABLE writegate.wg_http_clicks RENAME TO http_clicks;
ALTER TABLE public.wg_stream_events SET SCHEMA writegate;
ALTER TABLE writegate.wg_stream_events RENAME TO stream_events;
""" + renamed_as_fresh("writegate.service_migrations")

SERVICE = MigrationList(
    name="service",
    table="writegate.service_migrations",
    migrations=MIGRATIONS,
    legacy=("public.wg_api_keys", LEGACY_ADOPTION),
)
