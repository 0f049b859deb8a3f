"""The console's lists page: `writegate escalations` (`--kind execution|failover`),
`writegate webhooks failing`, `writegate webhooks list` and `writegate keys list` take
`--cursor`, `--limit`, `--order`, and say after each page how to ask for the next. A
walk of each, both ways, gets every seeded row exactly once, in order (five escalated
executions share each `created_at`, all the seeded keys or endpoints one), while
another connection keeps adding rows."""

from __future__ import annotations

import json
import secrets
from collections import Counter
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
import typer
from psycopg.rows import dict_row
from typer.testing import CliRunner

from writegate.checkpoints.schema import setup_database
from writegate.surfaces.cli import ops as cli_ops
from writegate.surfaces.cli import serve as cli_serve
from writegate.surfaces.cli import webhooks as cli_webhooks
from writegate.surfaces.store import setup_service

ROWS = 60
PAGE = 7
ESCALATED_SQL = """
WITH seed AS (
    SELECT %(tag)s || lpad(n::text, 5, '0') AS id,
           %(at)s::timestamptz + (n / 5) * interval '1 second' AS at
    FROM generate_series(1, %(rows)s) AS n
), proposals AS (
    INSERT INTO writegate.proposals (proposal_id, thread_id, tool_call_id, subject, tenant_id,
        operation, resource, args, args_digest, fingerprint, state_version, preview,
        policy_version, request_key, status, created_at, expires_at)
    SELECT 'prop_' || id, 'th_esc', 'call_' || id, 'alice', %(tenant)s, 'pay', 'account:a',
        '{}', 'sha256:x', 'fp', 0, '{}', 'p1', 'rk_' || id, 'executed', at, at
    FROM seed RETURNING proposal_id
), tokens AS (
    INSERT INTO writegate.tokens (token_hash, proposal_id, subject, tenant_id, audience,
        operation, resource, args_digest, policy_version, request_key, issued_at, expires_at,
        status, execution_id)
    SELECT 'tok_' || id, 'prop_' || id, 'alice', %(tenant)s, 'writegate', 'pay', 'account:a',
        'sha256:x', 'p1', 'rk_' || id, at, at, 'consumed', 'exec_' || id
    FROM seed WHERE 'prop_' || id IN (SELECT proposal_id FROM proposals)
    RETURNING token_hash
)
INSERT INTO writegate.executions (execution_id, request_key, token_hash, proposal_id,
    tenant_id, subject, operation, resource, args, args_digest, fingerprint, status,
    escalation, created_at, updated_at)
SELECT 'exec_' || id, 'rk_' || id, 'tok_' || id, 'prop_' || id, %(tenant)s, 'alice', 'pay',
    'account:a', '{}', 'sha256:x', 'fp', 'escalated', '{"reason": "still_ambiguous"}', at, at
FROM seed WHERE 'tok_' || id IN (SELECT token_hash FROM tokens)
RETURNING execution_id"""
FAILOVER_SQL = """
INSERT INTO writegate.failover_escalations (request_key, operation, tenant_id, timeline_id,
    reason)
SELECT %(tag)s || n, 'pay', %(tenant)s, 1, '{"reason": "lost_commit"}'
FROM generate_series(1, %(rows)s) AS n
RETURNING escalation_id"""

ENDPOINT_SQL = """
INSERT INTO writegate.webhook_endpoints (endpoint_id, tenant_id, url, secret)
VALUES ('ep_' || %(tenant)s, %(tenant)s, 'http://127.0.0.1:9/hook', 'whsec_x')
RETURNING endpoint_id"""
FAILING_SQL = """
INSERT INTO writegate.outbox (event_id, endpoint_id, tenant_id, event_type, payload, attempts,
    last_error)
SELECT %(tag)s || n, %(endpoint)s, %(tenant)s, 'question.waiting', '{}', 3 + n %% 2, 'refused'
FROM generate_series(1, %(rows)s) AS n
RETURNING delivery_id"""

ENDPOINTS_SQL = """
INSERT INTO writegate.webhook_endpoints (endpoint_id, tenant_id, url, secret)
SELECT 'ep_' || %(tag)s || lpad(n::text, 5, '0'), %(tenant)s, 'http://127.0.0.1:9/' || n, 'x'
FROM generate_series(1, %(rows)s) AS n
RETURNING endpoint_id"""
KEYS_SQL = """
INSERT INTO writegate.api_keys (key_hash, key_id, user_id, tenant_id)
SELECT 'hash_' || %(tag)s || lpad(n::text, 5, '0'), 'kid_' || %(tag)s || lpad(n::text, 5, '0'),
    'alice', %(tenant)s
FROM generate_series(1, %(rows)s) AS n
RETURNING key_id"""


@pytest.fixture(scope="module")
def url(create_database: Callable[[], str]) -> str:
    url = create_database()
    setup_database(url)
    setup_service(url)
    return url


@pytest.fixture(scope="module")
def tenant() -> str:
    return f"tenant_{secrets.token_hex(4)}"


@pytest.fixture(scope="module")
def seeded(url: str, tenant: str) -> dict[str, list[Any]]:
    params = {"tenant": tenant, "rows": ROWS, "at": "2026-01-01T00:00:00Z"}
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        executions = conn.execute(ESCALATED_SQL, {**params, "tag": "seed_"}).fetchall()
        failovers = conn.execute(FAILOVER_SQL, {**params, "tag": "seed_"}).fetchall()
        keys = conn.execute(KEYS_SQL, {**params, "tag": "seed_"}).fetchall()  # one created_at
        endpoints = conn.execute(ENDPOINTS_SQL, {**params, "tag": "seed_"}).fetchall()
        endpoint = conn.execute(ENDPOINT_SQL, params).fetchone()
        assert endpoint is not None
        failing = conn.execute(
            FAILING_SQL, {**params, "tag": "seed_", "endpoint": endpoint["endpoint_id"]}
        ).fetchall()
    return {
        "execution": [r["execution_id"] for r in executions],
        "failover": [r["escalation_id"] for r in failovers],
        "endpoint": [endpoint["endpoint_id"]],
        "failing": [r["delivery_id"] for r in failing],
        "keys": [r["key_id"] for r in keys],
        "endpoints": [r["endpoint_id"] for r in endpoints],
    }


def cli(url: str, *args: str) -> typer.testing.Result:
    app = typer.Typer()
    cli_ops.register(app)
    cli_webhooks.register(app)
    cli_serve.register(app)
    return CliRunner().invoke(app, list(args), env={"DATABASE_URL": url})


def escalations(url: str, *args: str) -> typer.testing.Result:
    return cli(url, "escalations", *args)


def walk(
    url: str, command: list[str], id_key: str, more_sql: str, more: dict[str, Any]
) -> list[Any]:
    """Every page of a listing `command`, as JSON; `more_sql` writes three more rows on
    another connection between every two pages."""
    got: list[Any] = []
    cursor: list[str] = []
    with psycopg.connect(url, autocommit=True) as writer:
        while True:
            result = cli(url, *command, "--json", "--limit", str(PAGE), *cursor)
            assert result.exit_code == 0, result.output
            rows = json.loads(result.stdout)
            assert len(rows) <= PAGE
            got += [r[id_key] for r in rows]
            writer.execute(more_sql, {**more, "rows": 3, "tag": f"new_{secrets.token_hex(4)}_"})
            hint = [line for line in result.stderr.splitlines() if "--cursor" in line]
            if not hint:
                return got
            cursor = ["--cursor", hint[0].split("--cursor ", 1)[1].strip()]


def each_once_in_order(got: list[Any], seeded: list[Any], order: str) -> None:
    counts = Counter(got)
    assert not {i for i, n in counts.items() if n > 1}  # nothing twice, new rows neither
    wanted = seeded if order == "oldest" else seeded[::-1]
    assert [i for i in got if i in set(wanted)] == wanted  # each seeded row, in order
    assert len(got) > len(seeded)  # rows written meanwhile came too, each once


@pytest.mark.parametrize("order", ["oldest", "newest"])
@pytest.mark.parametrize("kind", ["execution", "failover"])
def test_each_kind_of_escalation_pages_once_each_while_more_are_escalated(
    url: str, tenant: str, seeded: dict[str, list[Any]], kind: str, order: str
) -> None:
    command = ["escalations", "--tenant", tenant, "--kind", kind, "--order", order]
    id_key, more_sql = (
        ("execution_id", ESCALATED_SQL) if kind == "execution" else ("escalation_id", FAILOVER_SQL)
    )
    more = {"tenant": tenant, "at": "2026-06-01T00:00:00Z"}
    each_once_in_order(walk(url, command, id_key, more_sql, more), seeded[kind], order)


@pytest.mark.parametrize("order", ["oldest", "newest"])
def test_failing_deliveries_page_once_each_while_more_fail(
    url: str, tenant: str, seeded: dict[str, list[Any]], order: str
) -> None:
    command = ["webhooks", "failing", "--tenant", tenant, "--order", order]
    more = {"tenant": tenant, "endpoint": seeded["endpoint"][0]}
    got = walk(url, command, "delivery_id", FAILING_SQL, more)
    each_once_in_order(got, seeded["failing"], order)


# Lists of one command each: the command, the row's id, the rows seeded, the SQL adding more.
PLAIN_LISTS = {
    "keys": (["keys", "list"], "key_id", KEYS_SQL),
    "endpoints": (["webhooks", "list"], "endpoint_id", ENDPOINTS_SQL),
}


@pytest.mark.parametrize("order", ["oldest", "newest"])
@pytest.mark.parametrize("listed", list(PLAIN_LISTS))
def test_keys_and_endpoints_page_once_each_while_more_are_made(
    url: str, tenant: str, seeded: dict[str, list[Any]], listed: str, order: str
) -> None:
    command, id_key, more_sql = PLAIN_LISTS[listed]
    got = walk(
        url, [*command, "--tenant", tenant, "--order", order], id_key, more_sql, {"tenant": tenant}
    )
    each_once_in_order(got, seeded[listed], order)


def test_both_kinds_print_a_next_page_line_each(
    url: str, tenant: str, seeded: dict[str, list[Any]]
) -> None:
    shown = escalations(url, "--tenant", tenant, "--limit", "2")
    assert shown.exit_code == 0, shown.output
    assert "next page of execution escalations: --kind execution --cursor" in shown.stdout
    assert "next page of failover escalations: --kind failover --cursor" in shown.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["--cursor", "e30"],  # a cursor needs its kind
        ["--kind", "execution", "--cursor", "e30"],
        ["--kind", "sideways"],
        ["--kind", "failover", "--order", "sideways"],
    ],
)
def test_a_cursor_without_its_kind_or_not_one_is_refused(
    url: str, tenant: str, seeded: dict[str, list[Any]], args: list[str]
) -> None:
    refused = escalations(url, "--tenant", tenant, *args)
    assert refused.exit_code == 1 and "validation_failed" in refused.output
    assert "Traceback" not in refused.output
