"""SQL for the webhook outbox: endpoints, the expiry warnings, claims and their outcomes.

The events themselves are written by triggers (`schema.py`, the outbox migration) in the
transaction that caused them. A deliverer claims with `FOR UPDATE SKIP LOCKED`, so any
number of them, in any number of processes, each get different rows; the claim moves
the row's next attempt past the lease, so a deliverer that dies mid-send leaves a row
that comes due again by itself.
"""

from __future__ import annotations

from writegate.checkpoints.ledger_sql import after_created
from writegate.checkpoints.namespace import Statements

ENDPOINT_COLUMNS = "endpoint_id, tenant_id, url, event_types, expiring_within, created_at"


ENDPOINT_FILTERS = {"tenant_id": "tenant_id = %(tenant_id)s"}
ENDPOINTS_AFTER = after_created("endpoint_id")


DELIVERY_COLUMNS = """o.delivery_id, o.event_id, o.event_type, o.endpoint_id, o.tenant_id,
    e.url, o.attempts, o.last_error, o.last_attempt_at, o.next_attempt_at, o.created_at,
    o.delivered_at"""

FAILING_FILTERS = {"tenant_id": "o.tenant_id = %(tenant_id)s"}
FAILING_AFTER = {
    "oldest": ("o.delivery_id > %(after)s", "ASC"),
    "newest": ("o.delivery_id < %(after)s", "DESC"),
}


class OutboxSQL(Statements):
    """The webhook outbox's statements, written for the default schema;
    `sql_for(OutboxSQL, schema)` holds them for another."""

    ADD_ENDPOINT_SQL = f"""
INSERT INTO writegate.webhook_endpoints
    (endpoint_id, tenant_id, url, secret, event_types, expiring_within)
VALUES (%(endpoint_id)s, %(tenant_id)s, %(url)s, %(secret)s, %(event_types)s,
    make_interval(secs => %(expiring_within)s))
RETURNING {ENDPOINT_COLUMNS}"""

    # A page of endpoints: keyset on (created_at, endpoint_id), neither ever updated.
    LIST_ENDPOINTS_SQL = f"""
SELECT {ENDPOINT_COLUMNS} FROM writegate.webhook_endpoints
WHERE removed_at IS NULL{{where}}
ORDER BY created_at {{direction}}, endpoint_id {{direction}}
LIMIT %(limit)s"""

    # Removed, not deleted: its deliveries stay as history, and none is sent any more.
    REMOVE_ENDPOINT_SQL = """
UPDATE writegate.webhook_endpoints SET removed_at = now()
WHERE endpoint_id = %(endpoint_id)s AND removed_at IS NULL
    AND (%(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s)
RETURNING endpoint_id"""

    # Once per proposal and endpoint: the event id is the proposal's, the constraint
    # outbox_event_endpoint_key the guard (NOT EXISTS only spares the sequence).
    WRITE_EXPIRING_SQL = """
INSERT INTO writegate.outbox (event_id, endpoint_id, tenant_id, event_type, payload)
SELECT writegate.event_id('proposal.expiring', p.proposal_id), e.endpoint_id, e.tenant_id,
    'proposal.expiring',
    jsonb_build_object('type', 'proposal.expiring', 'timestamp', now(),
        'data', writegate.proposal_data(p))
FROM writegate.webhook_endpoints e
JOIN writegate.proposals p ON p.tenant_id = e.tenant_id
WHERE e.removed_at IS NULL
    AND (e.event_types IS NULL OR 'proposal.expiring' = ANY (e.event_types))
    AND p.status IN ('awaiting_confirmation', 'awaiting_second_approval')
    AND p.expires_at > now() AND p.expires_at <= now() + e.expiring_within
    AND NOT EXISTS (SELECT 1 FROM writegate.outbox o
        WHERE o.event_id = writegate.event_id('proposal.expiring', p.proposal_id)
            AND o.endpoint_id = e.endpoint_id)
ON CONFLICT (event_id, endpoint_id) DO NOTHING"""

    CLAIM_DUE_SQL = """
WITH due AS (
    SELECT o.delivery_id
    FROM writegate.outbox o
    JOIN writegate.webhook_endpoints e ON e.endpoint_id = o.endpoint_id
    WHERE o.delivered_at IS NULL AND o.next_attempt_at <= now() AND e.removed_at IS NULL
    ORDER BY o.next_attempt_at
    LIMIT %(limit)s
    FOR UPDATE OF o SKIP LOCKED
)
UPDATE writegate.outbox AS o
SET attempts = o.attempts + 1,
    next_attempt_at = now() + make_interval(secs => %(lease_seconds)s),
    lease_owner = %(owner)s,
    last_attempt_at = now()
FROM due, writegate.webhook_endpoints e
WHERE o.delivery_id = due.delivery_id AND e.endpoint_id = o.endpoint_id
RETURNING o.delivery_id, o.event_id, o.event_type, o.endpoint_id, e.url, e.secret,
    o.attempts, o.payload"""

    MARK_DELIVERED_SQL = """
UPDATE writegate.outbox SET delivered_at = now(), lease_owner = NULL, last_error = NULL
WHERE delivery_id = %(delivery_id)s AND delivered_at IS NULL"""

    MARK_FAILED_SQL = """
UPDATE writegate.outbox
SET next_attempt_at = now() + make_interval(secs => %(retry_in)s),
    last_error = %(error)s, lease_owner = NULL
WHERE delivery_id = %(delivery_id)s AND delivered_at IS NULL AND lease_owner = %(owner)s"""

    # Undelivered after `min_attempts` attempts or more: the endpoint keeps refusing.
    # A page of them: keyset on delivery_id (a bigserial, never updated); `{where}` only of
    # FAILING_FILTERS' and FAILING_AFTER's fixed texts.
    FAILING_SQL = f"""
SELECT {DELIVERY_COLUMNS}
FROM writegate.outbox o JOIN writegate.webhook_endpoints e ON e.endpoint_id = o.endpoint_id
WHERE o.delivered_at IS NULL AND o.attempts >= %(min_attempts)s{{where}}
ORDER BY o.delivery_id {{direction}}
LIMIT %(limit)s"""

    # Due now, delivered or not, under the same event id.
    REPLAY_SQL = f"""
WITH replayed AS (
    UPDATE writegate.outbox
    SET next_attempt_at = now(), delivered_at = NULL, lease_owner = NULL
    WHERE delivery_id = %(delivery_id)s
        AND (%(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s)
    RETURNING *
)
SELECT {DELIVERY_COLUMNS}
FROM replayed o JOIN writegate.webhook_endpoints e ON e.endpoint_id = o.endpoint_id"""

    DELIVERIES_SQL = f"""
SELECT {DELIVERY_COLUMNS}
FROM writegate.outbox o JOIN writegate.webhook_endpoints e ON e.endpoint_id = o.endpoint_id
WHERE (%(tenant_id)s::text IS NULL OR o.tenant_id = %(tenant_id)s)
ORDER BY o.delivery_id"""
