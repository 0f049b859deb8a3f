"""A large reconcile backlog, cloned from one real executed refund, and its check.

Each clone is a refund whose answer was lost: its own order (with the amount reserved),
a proposal marked `executed`, its consumed token, an execution left `unknown` and a
`pending` refund row, every id and request key fresh and every digest recomputed with
the code's own functions. A share of the keys is also in the provider's store (it
applied the refund, the answer was lost); the rest were never seen by the provider (the
call was lost before it). Every other field is copied from the template, so the rows
are what the service writes. The ledger's rows are read and written by the ledger store
(`PgLedgerTx.load`: one COPY per table), never by hand, so a column change is the
store's to follow; the demo's tables take one `INSERT ... SELECT ... unnest(...)` each.

The rules then say: a key the provider has is settled `found` with its reference; a key
it never saw (younger than the key retention) is sent again with the SAME key and
settled `retried`. `check` verifies exactly that, and that no order was refunded twice.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from writegate.approval.canonical import digest, request_fingerprint
from writegate.approval.models import Execution, ExecutionStatus, Proposal, Token
from writegate.checkpoints.ledger import PgLedgerStore, PgLedgerTx
from writegate.checkpoints.pool import open_pool
from writegate.demo.provider import request_digest
from writegate.demo.refunds import refund_id_for

# The demo's side of an executed refund: its refund row, and the provider's (the ledger's
# side is read by the ledger store), oldest first.
DEMO_REFUNDS_SQL = """
SELECT r.request_key, r.refund_id
FROM refunds r JOIN provider.refunds pr ON pr.idempotency_key = r.request_key
WHERE r.status = 'succeeded'
ORDER BY r.created_at"""
COLUMNS_SQL = """
SELECT column_name, udt_name FROM information_schema.columns
WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position"""
# The demo's side of the clones: the refund rows, and the provider's where it has one.
DEMO_CHECK_SQL = """
SELECT r.request_key, r.status, r.provider_ref, pr.provider_ref AS provider_has,
       pr.created_at AS provider_at
FROM refunds r LEFT JOIN provider.refunds pr ON pr.idempotency_key = r.request_key
WHERE r.request_key = ANY(%(keys)s)"""
EFFECTS_SQL = """
SELECT count(*) AS effects, count(DISTINCT order_id) AS orders
FROM provider.refunds WHERE order_id = ANY(%(orders)s)"""
AUDIT_PAGE = 500


Template = tuple[Proposal, Token, Execution]


@dataclass(frozen=True)
class Backlog:
    execution_ids: list[str]
    order_ids: list[str]
    seen: int  # keys the provider already had
    tenant_id: str

    @property
    def size(self) -> int:
        return len(self.execution_ids)


def _clone(
    conn: psycopg.Connection[Any],
    table: str,
    key: str,
    template: str,
    arrays: dict[str, list[str]],
    fixed: dict[str, str] | None = None,
) -> int:
    """Insert one copy of row `key = template` per element of the arrays: a column in
    `arrays` takes the element (text, cast to the column's type), one in `fixed` the SQL
    expression, every other column the template's value."""
    schema, _, name = table.rpartition(".")
    cur = conn.cursor(row_factory=psycopg.rows.tuple_row)
    columns = cur.execute(COLUMNS_SQL, (schema or "public", name)).fetchall()
    fixed = fixed or {}
    picks: list[sql.Composable] = []
    for col, udt in columns:
        if col in arrays:
            picks.append(sql.SQL("c.{}::{}").format(sql.Identifier(col), sql.Identifier(udt)))
        elif col in fixed:
            picks.append(sql.SQL(fixed[col]))
        else:
            picks.append(sql.SQL("t.{}").format(sql.Identifier(col)))
    names = list(arrays)
    query = sql.SQL(
        "INSERT INTO {table} ({cols}) SELECT {picks} FROM {table} AS t, "
        "unnest({params}) AS c({names}) WHERE t.{key} = %s"
    ).format(
        table=sql.Identifier(*table.split(".")),
        cols=sql.SQL(", ").join(sql.Identifier(col) for col, _ in columns),
        picks=sql.SQL(", ").join(picks),
        params=sql.SQL(", ").join(sql.SQL("%s::text[]") for _ in names),
        names=sql.SQL(", ").join(sql.Identifier(n) for n in names),
        key=sql.Identifier(key),
    )
    return conn.execute(query, [*(arrays[n] for n in names), template]).rowcount


def _copies(
    template: Template, tenant: str, n: int, now: datetime
) -> tuple[dict[str, list[str]], list[Proposal], list[Token], list[Execution]]:
    """n copies of the template's rows, each a refund of an order of its own whose answer
    was lost; and the values the demo's tables take (one list per column)."""
    proposal, token, execution = template
    old_order = proposal.args["order_id"]
    preview = json.dumps(proposal.preview)
    demo: dict[str, list[str]] = {k: [] for k in (
        "order_id", "request_key", "refund_id", "provider_ref", "request_digest")}  # fmt: skip
    proposals, tokens, executions = [], [], []
    for _ in range(n):
        tag = secrets.token_hex(8)
        order = f"ord_k{tag}"
        args = {**proposal.args, "order_id": order}
        proposal_id, execution_id = f"prop_k{tag}", f"exe_k{tag}"
        resource = proposal.resource.replace(old_order, order)
        key = proposal.request_key.replace(proposal.proposal_id, proposal_id).replace(
            proposal.resource, resource
        )
        args_digest = digest(args)
        fingerprint = request_fingerprint(tenant, proposal.operation, args)
        token_hash = secrets.token_hex(32)
        proposals.append(
            replace(
                proposal, proposal_id=proposal_id, thread_id=f"thr_k{tag}",
                tool_call_id=f"call_k{tag}", resource=resource, args=args,
                args_digest=args_digest, fingerprint=fingerprint, request_key=key,
                preview=json.loads(preview.replace(old_order, order)),
            )
        )  # fmt: skip
        tokens.append(
            replace(
                token, token_hash=token_hash, proposal_id=proposal_id,
                execution_id=execution_id,
            )
        )  # fmt: skip
        executions.append(
            replace(
                execution, execution_id=execution_id, request_key=key, token_hash=token_hash,
                proposal_id=proposal_id, resource=resource, args=args, args_digest=args_digest,
                fingerprint=fingerprint, status=ExecutionStatus.UNKNOWN, lease_owner=None,
                lease_expires_at=None, provider_ref=None, result=None,
                error_code="upstream_timeout", completed_at=None, created_at=now,
                updated_at=now,
            )
        )  # fmt: skip
        values = {
            "order_id": order,
            "request_key": key,
            "refund_id": refund_id_for(key),
            "provider_ref": "re_" + secrets.token_hex(12),
            "request_digest": request_digest(order, args["amount_minor"], args["currency"]),
        }
        for k, v in values.items():
            demo[k].append(v)
    return demo, proposals, tokens, executions


def make_backlog(url: str, n: int, seen_fraction: float = 0.5) -> Backlog:
    """n unknown outcomes cloned from the oldest executed refund (there must be one): the
    ledger's rows read and written by the ledger store, the demo's cloned in SQL."""
    with open_pool(url, max_size=1) as pool:
        store = PgLedgerStore(pool)
        with store.transaction() as tx:
            template, refund_id = _template(tx)
            tenant = template[2].tenant_id
            demo, proposals, tokens, executions = _copies(template, tenant, n, tx.now())
            seen = int(n * seen_fraction)

            def pick(*names: str, upto: int | None = None) -> dict[str, list[str]]:
                return {name: demo[name][:upto] for name in names}

            old_order = template[0].args["order_id"]
            _clone(tx.conn, "orders", "order_id", old_order, pick("order_id"))
            tx.load(proposals, tokens, executions)
            _clone(
                tx.conn, "refunds", "refund_id", refund_id,
                pick("refund_id", "order_id", "request_key"),
                {"status": "'pending'", "provider_ref": "NULL", "created_at": "now()"},
            )  # fmt: skip
            # The provider applied these before the answer was lost (created a moment
            # before the execution row, as a real timeout would order them).
            provider = pick("request_key", "provider_ref", "order_id", "request_digest", upto=seen)
            provider["idempotency_key"] = provider.pop("request_key")
            _clone(
                tx.conn, "provider.refunds", "idempotency_key", template[2].request_key,
                provider, {"created_at": "now() - interval '1 second'"},
            )  # fmt: skip
    return Backlog([e.execution_id for e in executions], demo["order_id"], seen, tenant)


def _template(tx: PgLedgerTx) -> tuple[Template, str]:
    """The oldest executed refund's rows, as the ledger store reads them, and its refund
    row's id: the first refund the provider applied whose execution succeeded."""
    for row in tx.conn.execute(DEMO_REFUNDS_SQL).fetchall():
        execution = tx.get_execution(request_key=row["request_key"])
        if (
            execution is not None
            and execution.operation == "refund_order"
            and execution.status is ExecutionStatus.SUCCEEDED
        ):
            proposal = tx.get_proposal(execution.proposal_id)
            token = tx.get_token_for_proposal(execution.proposal_id)
            assert proposal is not None and token is not None
            return (proposal, token, execution), row["refund_id"]
    raise RuntimeError("no executed refund to clone")


def _reconciled(store: PgLedgerStore, tenant_id: str, keys: set[str]) -> list[tuple[str, str]]:
    """The reconciler's succeeded audit rows of the request keys `keys`, as (request key,
    action), read a page at a time by the ledger store."""
    out: list[tuple[str, str]] = []
    after = None
    while True:
        page = list(store.audit_rows(tenant_id, status="succeeded", after=after, limit=AUDIT_PAGE))
        out += [
            (row["request_key"], str((row["result"] or {}).get("action")))
            for row in page
            if row["event"] == "reconcile" and row["request_key"] in keys
        ]
        if len(page) < AUDIT_PAGE:
            return out
        after = page[-1]["audit_id"]


def check(url: str, backlog: Backlog) -> dict[str, Any]:
    """Every clone settled `succeeded` by the reconciler with the provider's one
    reference, the seen keys `found` and the others `retried` once; each order refunded
    exactly once. The ledger's rows are read by the ledger store, the demo's here."""
    with open_pool(url, max_size=1) as pool:
        store = PgLedgerStore(pool)
        with store.reading() as tx:
            found_rows = [tx.get_execution(execution_id=i) for i in backlog.execution_ids]
        executions = {e.request_key: e for e in found_rows if e is not None}
        actions = _reconciled(store, backlog.tenant_id, set(executions))
    params = {"keys": list(executions), "orders": backlog.order_ids}
    with psycopg.connect(url, row_factory=psycopg.rows.dict_row) as conn:
        demo = {row["request_key"]: row for row in conn.execute(DEMO_CHECK_SQL, params)}
        effects = conn.execute(EFFECTS_SQL, params).fetchone()
    assert effects is not None
    settled = {key for key, _ in actions}
    rows = [(executions[key], refund) for key, refund in demo.items()]
    by: dict[tuple[str, bool], int] = {}
    for key, action in actions:
        provider_at = demo[key]["provider_at"] if key in demo else None
        if provider_at is not None:  # as counted: the keys the provider has
            seen = provider_at < executions[key].created_at
            by[(action, seen)] = by.get((action, seen), 0) + 1
    found, retried = by.get(("found", True), 0), by.get(("retried", False), 0)
    out = {
        "rows": len(rows),
        "settled_correctly": sum(
            e.status is ExecutionStatus.SUCCEEDED
            and r["provider_has"] is not None
            and e.provider_ref == r["provider_has"]
            and r["status"] == "succeeded"
            and r["provider_ref"] == r["provider_has"]
            and e.request_key in settled
            for e, r in rows
        ),
        "not_succeeded": sum(e.status is not ExecutionStatus.SUCCEEDED for e, _ in rows),
        "found": found,
        "retried": retried,
        "other_actions": sum(by.values()) - found - retried,
        "provider_effects": effects["effects"],
        "duplicated_effects": effects["effects"] - effects["orders"],
        "lost": backlog.size - effects["orders"],
    }
    out["ok"] = (
        out["rows"] == out["settled_correctly"] == backlog.size
        and found == backlog.seen
        and retried == backlog.size - backlog.seen
        and out["other_actions"] == 0
        and out["duplicated_effects"] == 0
        and out["lost"] == 0
    )
    return out
