"""SQL for the scale part: the provider's rows (the demo's, written here), and the
probes the ledger is read with, which are the product's own statements (`ViewsSQL`,
`OpsSQL`): the bench times and explains exactly what ships. Nothing here names a ledger
table: the ledger rows are made by the ledger store (`bench/scale.py`), the sweep's
writes by the approval service.
"""

from __future__ import annotations

from typing import Any

from writegate.checkpoints import views_sql
from writegate.checkpoints.ledger_sql import created_page
from writegate.checkpoints.namespace import DEFAULT_SCHEMA, sql_for
from writegate.checkpoints.ops_sql import OpsSQL
from writegate.checkpoints.views_sql import ViewsSQL

TENANT = "tenant_scale"

# Half the backlog did reach the provider before the answer was lost.
INSERT_PROVIDER_SQL = """
INSERT INTO provider.refunds (idempotency_key, provider_ref, order_id, amount_minor,
    currency, request_digest)
SELECT 'refund_order:' || %(tenant)s || ':order:o' || g || ':p' || g, 're_' || g,
    'o' || g, 1000, 'CNY', md5('d' || g)
FROM generate_series(1, %(n)s) AS g WHERE g %% 200 = 2"""

ANALYZE_SQL = "ANALYZE"

# The product's own statements, as it runs them: a column change follows here by itself.
VIEWS = sql_for(ViewsSQL, DEFAULT_SCHEMA)
OPS = sql_for(OpsSQL, DEFAULT_SCHEMA)


def list_pending(user: str) -> tuple[str, dict[str, Any]]:
    """A user's pending approvals, a first page of 50: the statement and parameters
    `PgViews.my_proposals(..., pending=True)` runs (one row more than the page, to know
    whether there is a next)."""
    given = {"pending": True}
    params: dict[str, Any] = {"tenant_id": TENANT, "subject": user, **given, "limit": 51}
    query = created_page(
        VIEWS.MINE_PAGE_SQL, views_sql.MINE_FILTERS, given, views_sql.MINE_AFTER, "oldest",
        None, params,
    )  # fmt: skip
    return query, params


# The expiry sweep's pick: a batch of stale proposals, locked, oldest expiry first (each
# is then expired by the approval service, audited). Timed as a probe in a transaction
# rolled back after, so it locks nothing for long.
STALE_PICK_SQL = OPS.PICK_STALE_PROPOSALS_SQL

# The reconciler's claim of its backlog (`PgBacklog.claim_due`): timed as a probe in a
# transaction rolled back after, so it claims nothing.
BACKLOG_CLAIM_SQL = OPS.CLAIM_DUE_SQL
BACKLOG_CLAIM = {
    "operations": ["refund_order"],
    "limit": 100,
    "owner": "bench-probe",
    "lease_seconds": 30.0,
}

# The indexes each statement is planned on (checkpoints/schema.py). The pending list's
# are the two on a requester's proposals in time order (the older partial
# proposals_pending_idx leaves out awaiting_second_approval, which the product's list
# has, so it never plans on that one).
INDEX_FOR = {
    "list_pending": ("proposals_subject_idx", "proposals_mine_page_idx"),
    "expire_stale": ("proposals_expiry_idx",),
    "reconcile_backlog": ("executions_backlog_idx",),
}
DROP_INDEX_SQL = "DROP INDEX {}"
