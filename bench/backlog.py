"""A large reconcile backlog, cloned from one real executed refund, and its check.

Each clone is a refund whose answer was lost: its own order (with the amount reserved),
a proposal marked `executed`, its consumed token, an execution left `unknown` and a
`pending` refund row, every id and request key fresh and every digest recomputed with
the code's own functions. A share of the keys is also in the provider's store (it
applied the refund, the answer was lost); the rest were never seen by the provider (the
call was lost before it). Every other column is copied from the template, so the rows
are what the service writes. One `INSERT ... SELECT ... unnest(...)` per table.

The rules then say: a key the provider has is settled `found` with its reference; a key
it never saw (younger than the key retention) is sent again with the SAME key and
settled `retried`. `check` verifies exactly that, and that no order was refunded twice.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from writegate.approval.canonical import digest, request_fingerprint
from writegate.demo.provider import request_digest
from writegate.demo.refunds import refund_id_for

TEMPLATE_SQL = """
SELECT e.execution_id, e.proposal_id, e.token_hash, e.request_key, e.resource, e.args,
       e.tenant_id, e.operation, p.thread_id, p.preview::text AS preview, r.refund_id
FROM writegate.executions e
JOIN writegate.proposals p ON p.proposal_id = e.proposal_id
JOIN refunds r ON r.request_key = e.request_key
JOIN provider.refunds pr ON pr.idempotency_key = e.request_key
WHERE e.operation = 'refund_order' AND e.status = 'succeeded'
ORDER BY e.created_at LIMIT 1"""
COLUMNS_SQL = """
SELECT column_name, udt_name FROM information_schema.columns
WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position"""
CHECK_SQL = """
SELECT count(*) AS total,
       count(*) FILTER (WHERE e.status = 'succeeded' AND e.provider_ref = pr.provider_ref
                          AND r.status = 'succeeded' AND r.provider_ref = pr.provider_ref
                          AND e.reconciled_at IS NOT NULL) AS settled_ok,
       count(*) FILTER (WHERE pr.idempotency_key IS NULL) AS missing_at_provider,
       count(*) FILTER (WHERE e.status <> 'succeeded') AS not_succeeded
FROM writegate.executions e
JOIN refunds r ON r.request_key = e.request_key
LEFT JOIN provider.refunds pr ON pr.idempotency_key = e.request_key
WHERE e.execution_id = ANY(%(ids)s)"""
EFFECTS_SQL = """
SELECT count(*) AS effects, count(DISTINCT order_id) AS orders
FROM provider.refunds WHERE order_id = ANY(%(orders)s)"""
ACTIONS_SQL = """
SELECT a.result->>'action' AS action, (pr.created_at < e.created_at) AS seen, count(*) AS n
FROM writegate.audit a
JOIN writegate.executions e ON e.request_key = a.request_key
JOIN provider.refunds pr ON pr.idempotency_key = e.request_key
WHERE a.event = 'reconcile' AND a.status = 'succeeded' AND e.execution_id = ANY(%(ids)s)
GROUP BY 1, 2"""


@dataclass(frozen=True)
class Backlog:
    execution_ids: list[str]
    order_ids: list[str]
    seen: int  # keys the provider already had

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


def make_backlog(url: str, n: int, seen_fraction: float = 0.5) -> Backlog:
    """n unknown outcomes cloned from the oldest executed refund (there must be one)."""
    with psycopg.connect(url, row_factory=psycopg.rows.dict_row) as conn:
        t = conn.execute(TEMPLATE_SQL).fetchone()
        if t is None:
            raise RuntimeError("no executed refund to clone")
        tenant, op, targs = t["tenant_id"], t["operation"], t["args"]
        old_order, old_resource = targs["order_id"], t["resource"]
        rows: dict[str, list[str]] = {k: [] for k in (
            "order_id", "proposal_id", "thread_id", "tool_call_id", "resource", "args",
            "args_digest", "fingerprint", "request_key", "preview", "token_hash",
            "execution_id", "refund_id", "provider_ref", "request_digest")}  # fmt: skip
        for _ in range(n):
            tag = secrets.token_hex(8)
            order = f"ord_k{tag}"
            args = {**targs, "order_id": order}
            proposal = f"prop_k{tag}"
            resource = old_resource.replace(old_order, order)
            key = (
                t["request_key"].replace(t["proposal_id"], proposal).replace(old_resource, resource)
            )
            values = {
                "order_id": order,
                "proposal_id": proposal,
                "thread_id": f"thr_k{tag}",
                "tool_call_id": f"call_k{tag}",
                "resource": resource,
                "args": json.dumps(args),
                "args_digest": digest(args),
                "fingerprint": request_fingerprint(tenant, op, args),
                "request_key": key,
                "preview": t["preview"].replace(old_order, order),
                "token_hash": secrets.token_hex(32),
                "execution_id": f"exe_k{tag}",
                "refund_id": refund_id_for(key),
                "provider_ref": "re_" + secrets.token_hex(12),
                "request_digest": request_digest(order, args["amount_minor"], args["currency"]),
            }
            for k, v in values.items():
                rows[k].append(v)
        seen = int(n * seen_fraction)

        def pick(*names: str, upto: int | None = None) -> dict[str, list[str]]:
            return {name: rows[name][:upto] for name in names}

        with conn.transaction():
            _clone(conn, "orders", "order_id", old_order, pick("order_id"))
            _clone(
                conn, "writegate.proposals", "proposal_id", t["proposal_id"],
                pick("proposal_id", "thread_id", "tool_call_id", "resource", "args",
                     "args_digest", "fingerprint", "request_key", "preview"),
                {"traceparent": "NULL"},
            )  # fmt: skip
            _clone(
                conn, "writegate.tokens", "token_hash", t["token_hash"],
                pick("token_hash", "proposal_id", "resource", "args_digest", "request_key",
                     "execution_id"),
            )  # fmt: skip
            _clone(
                conn, "writegate.executions", "execution_id", t["execution_id"],
                pick("execution_id", "request_key", "token_hash", "proposal_id", "resource",
                     "args", "args_digest", "fingerprint"),
                {"status": "'unknown'", "lease_owner": "NULL", "lease_expires_at": "NULL",
                 "provider_ref": "NULL", "result": "NULL", "error_code": "'upstream_timeout'",
                 "completed_at": "NULL", "checks": "0", "next_check_at": "NULL",
                 "reconciled_at": "NULL", "escalation": "NULL", "created_at": "now()",
                 "updated_at": "now()"},
            )  # fmt: skip
            _clone(
                conn, "refunds", "refund_id", t["refund_id"],
                pick("refund_id", "order_id", "request_key"),
                {"status": "'pending'", "provider_ref": "NULL", "created_at": "now()"},
            )  # fmt: skip
            # The provider applied these before the answer was lost (created a moment
            # before the execution row, as a real timeout would order them).
            provider = pick("request_key", "provider_ref", "order_id", "request_digest", upto=seen)
            provider["idempotency_key"] = provider.pop("request_key")
            template_key = t["request_key"]
            _clone(
                conn, "provider.refunds", "idempotency_key", template_key, provider,
                {"created_at": "now() - interval '1 second'"},
            )  # fmt: skip
    return Backlog(rows["execution_id"], rows["order_id"], seen)


def check(url: str, backlog: Backlog) -> dict[str, Any]:
    """Every clone settled `succeeded` with the provider's one reference, the seen keys
    `found` and the others `retried` once; each order refunded exactly once."""
    params = {"ids": backlog.execution_ids, "orders": backlog.order_ids}
    with psycopg.connect(url, row_factory=psycopg.rows.dict_row) as conn:
        rows = conn.execute(CHECK_SQL, params).fetchone()
        effects = conn.execute(EFFECTS_SQL, params).fetchone()
        actions = conn.execute(ACTIONS_SQL, params).fetchall()
    assert rows is not None and effects is not None
    by = {(a["action"], a["seen"]): a["n"] for a in actions}
    found, retried = by.get(("found", True), 0), by.get(("retried", False), 0)
    out = {
        "rows": rows["total"],
        "settled_correctly": rows["settled_ok"],
        "not_succeeded": rows["not_succeeded"],
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
