"""The migration runner (idempotent, append-only, safe from parallel processes), each
owner's list (the core's, the demo's, the HTTP service's), and the adoption of a
database set up before writegate's tables moved into a schema of their own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from langgraph.checkpoint.postgres import PostgresSaver

from tests.integration.legacy_schema import LEGACY_MIGRATIONS
from tests.integration.schema_objects import schema_objects
from writegate import __version__
from writegate.checkpoints.migrate import (
    RELEASE,
    MigrationError,
    MigrationList,
    apply_migrations,
    migration_checksum,
)
from writegate.checkpoints.schema import CORE, NAME_AS_FRESH, setup_database
from writegate.demo.schema import DEMO
from writegate.surfaces.store.schema import SERVICE

ROOT = Path(__file__).resolve().parents[2]
TABLE = "public.test_migrations_log"
# The sleep widens the window in which parallel runners would collide.
TEST_MIGRATIONS = [
    "SELECT pg_sleep(0.3); CREATE TABLE mig_items (id integer PRIMARY KEY)",
    "ALTER TABLE mig_items ADD COLUMN name text; CREATE TABLE mig_other (x integer)",
    "INSERT INTO mig_items (id, name) VALUES (1, 'only once')",
]
CHECKPOINT_TABLES = {
    "checkpoints",
    "checkpoint_blobs",
    "checkpoint_writes",
    "checkpoint_migrations",
}


def as_list(migrations: list[str]) -> MigrationList:
    return MigrationList(name="test", table=TABLE, migrations=migrations)


def _versions(url: str, table: str = TABLE) -> list[int]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(f"SELECT version FROM {table} ORDER BY version").fetchall()
    return [r[0] for r in rows]


def _scalar(url: str, query: str) -> object:
    with psycopg.connect(url) as conn:
        row = conn.execute(query).fetchone()
    assert row is not None
    return row[0]


def _run_parallel(code: str, n: int) -> list[str]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(n)
    ]
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
        outs.append(out.decode().strip())
    return outs


def test_runs_twice_and_appends(create_database: Callable[[], str]) -> None:
    url = create_database()
    assert apply_migrations(url, as_list(TEST_MIGRATIONS)) == 3
    assert apply_migrations(url, as_list(TEST_MIGRATIONS)) == 0
    assert _versions(url) == [1, 2, 3]
    assert _scalar(url, "SELECT count(*) FROM mig_items") == 1

    more = [*TEST_MIGRATIONS, "CREATE TABLE mig_third (y integer)"]
    with psycopg.connect(url, autocommit=True) as conn:
        assert apply_migrations(conn, as_list(more)) == 1
    assert _versions(url) == [1, 2, 3, 4]
    checksum = _scalar(url, f"SELECT checksum FROM {TABLE} WHERE version = 4")
    assert checksum == migration_checksum(more[3])


def test_edited_or_unknown_history_is_refused(create_database: Callable[[], str]) -> None:
    url = create_database()
    apply_migrations(url, as_list(TEST_MIGRATIONS))
    edited = [*TEST_MIGRATIONS]
    edited[1] = "ALTER TABLE mig_items ADD COLUMN label text"
    with pytest.raises(MigrationError, match="append-only"):
        apply_migrations(url, as_list(edited))
    with pytest.raises(MigrationError, match="older than the database"):
        apply_migrations(url, as_list(TEST_MIGRATIONS[:2]))
    # Whitespace-only edits are not changes.
    reindented = [m.replace(" ", "  ") for m in TEST_MIGRATIONS]
    assert apply_migrations(url, as_list(reindented)) == 0


def test_failed_migration_applies_nothing(create_database: Callable[[], str]) -> None:
    url = create_database()
    broken = [*TEST_MIGRATIONS, "CREATE TABLE mig_bad (", "CREATE TABLE mig_never (z int)"]
    apply_migrations(url, as_list(TEST_MIGRATIONS[:1]))
    with pytest.raises(MigrationError, match="test migration 4"):
        apply_migrations(url, as_list(broken))
    assert _versions(url) == [1]
    assert _scalar(url, "SELECT to_regclass('mig_other') IS NULL") is True


def test_refuses_connection_inside_transaction(create_database: Callable[[], str]) -> None:
    url = create_database()
    with psycopg.connect(url) as conn:
        conn.execute("SELECT 1")  # not autocommit: a transaction is now open
        with pytest.raises(MigrationError, match="no transaction open"):
            apply_migrations(conn, as_list(TEST_MIGRATIONS))


@pytest.mark.slow
def test_parallel_processes_apply_each_version_once(create_database: Callable[[], str]) -> None:
    url = create_database()
    code = (
        "import json, sys\n"
        "from writegate.checkpoints.migrate import MigrationList, apply_migrations\n"
        f"listed = MigrationList('test', {TABLE!r}, json.loads({json.dumps(TEST_MIGRATIONS)!r}))\n"
        f"print(apply_migrations({url!r}, listed))\n"
    )
    counts = [int(out) for out in _run_parallel(code, 4)]
    assert sorted(counts) == [0, 0, 0, 3]
    assert _versions(url) == [1, 2, 3]
    assert _scalar(url, "SELECT count(*) FROM mig_items") == 1


@pytest.mark.slow
def test_parallel_setup_database(create_database: Callable[[], str]) -> None:
    url = create_database()
    code = f"from writegate.checkpoints.schema import setup_database\nsetup_database({url!r})\n"
    _run_parallel(code, 3)
    _assert_fully_set_up(url)


def test_database_url_fixture_is_set_up(database_url: str) -> None:
    _assert_fully_set_up(database_url)


def _assert_fully_set_up(url: str) -> None:
    assert _versions(url, "writegate.migrations") == list(range(1, len(CORE.migrations) + 1))
    with psycopg.connect(url) as conn:
        tables = {
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            ).fetchall()
        }
        checkpoint_versions = conn.execute("SELECT v FROM checkpoint_migrations").fetchall()
        invalid = conn.execute("SELECT count(*) FROM pg_index WHERE NOT indisvalid").fetchone()
    assert tables >= CHECKPOINT_TABLES
    versions = sorted(r[0] for r in checkpoint_versions)
    assert versions == list(range(len(PostgresSaver.MIGRATIONS)))
    # A CREATE INDEX CONCURRENTLY that lost a race would leave an invalid index.
    assert invalid == (0,)


# The checksums of the migrations that have shipped, per list. Appending is how a schema
# changes: a new entry gets a new line here; an edited old entry fails this test.
SHIPPED_CHECKSUMS = {
    "writegate": [
        "c0b45bd9e034cba7cc2a6974f3d8d6556767eab05c477db8a4d185d0a255da0b",
        "49b479643336019cad1cdf59d4a5046c81b8cbd404406b82bf8d9b3cfc74c34f",
        "6db0d6328b3cc469f3604404c06626b0bfacb241d0856578728d053247121c7b",
        "a5c3985a47536cb6300addd90a72be5d83a2cec21b81a72d84359d818c553b63",
        "e03598d8af8a3f53f9bfd29c1d5280801453c773a3b0a6d103ae7119f8a43dcc",
        "a01936e50cc4bde3f8a1f4072868835b1a781b624219adc99b04570fdf3419f9",
        "0d9fb936daffaf06a869a351bbdffb526942751a353a34ff991fe376adadf0bf",
        "072fafb57a71da4377a472ab4044a2b92b5e46d99074f47948a5e514ce32fd21",
        "6fcf24e963abe3d793383f0e0d7665495165b714fd0551e6397108e8552a982b",
    ],
    "service": [
        "a9ee2e02534165d94557b03153413bc76e94ff35ee610db99fe6f0f4a7dc8eab",
        "fb61a3543b27bea39a0869c0be76947468dd1430ee1e12f75362668ed76fcd6a",
        "2e5368c0c36e2cebcaa0db1915524aba794de091edc9cc177b7c9db8b7c0cb40",
    ],
    "demo": ["83a783ecea599a953f6f0c633e4e59d2a61eb9f4b9cb11a7aada767d680dc331"],
}


@pytest.mark.parametrize("listed", [CORE, SERVICE, DEMO], ids=lambda m: m.name)
def test_shipped_migrations_are_never_edited(listed: MigrationList) -> None:
    shipped = SHIPPED_CHECKSUMS[listed.name]
    assert [migration_checksum(m) for m in listed.migrations[: len(shipped)]] == shipped


@pytest.mark.parametrize("listed", [CORE, SERVICE, DEMO], ids=lambda m: m.name)
def test_each_list_applies_once_on_a_fresh_database(
    create_database: Callable[[], str], listed: MigrationList
) -> None:
    url = create_database()
    assert apply_migrations(url, listed) == len(listed.migrations)
    assert apply_migrations(url, listed) == 0


# -- a database set up before the schema: adopted, rows and all ---------------------------

LEGACY = MigrationList("legacy", "public.writegate_migrations", LEGACY_MIGRATIONS)
LEGACY_ROWS_SQL = """
INSERT INTO wg_proposals (proposal_id, thread_id, tool_call_id, subject, tenant_id,
    operation, resource, args, args_digest, fingerprint, state_version, preview,
    policy_version, request_key, status, created_at, expires_at)
VALUES ('prop_old', 'th_old', 'call_0', 'alice', 't1', 'pay', 'account:a', '{}', 'sha256:x',
    'sha256:y', 0, '{}', 'p1', 'pay:t1:account:a:prop_old', 'executed', now(),
    now() + interval '1 hour');
INSERT INTO wg_tokens (token_hash, proposal_id, subject, tenant_id, audience, operation,
    resource, args_digest, policy_version, request_key, issued_at, expires_at, status,
    execution_id)
VALUES ('th_old', 'prop_old', 'alice', 't1', 'writegate', 'pay', 'account:a', 'sha256:x',
    'p1', 'pay:t1:account:a:prop_old', now(), now(), 'consumed', 'exec_old');
INSERT INTO wg_executions (execution_id, request_key, token_hash, proposal_id, tenant_id,
    subject, operation, resource, args, args_digest, fingerprint, status, created_at,
    updated_at)
VALUES ('exec_old', 'pay:t1:account:a:prop_old', 'th_old', 'prop_old', 't1', 'alice', 'pay',
    'account:a', '{}', 'sha256:x', 'sha256:y', 'unknown', now(), now());
INSERT INTO wg_audit (tenant_id, user_id, tool_name, event, status, duration_ms, proposal_id)
VALUES ('t1', 'alice', 'pay', 'execute', 'unknown', 1, 'prop_old');
INSERT INTO wg_api_keys (key_hash, key_id, user_id, tenant_id)
VALUES ('h', 'key_old', 'alice', 't1');
INSERT INTO orders (order_id, tenant_id, user_id, currency, payable_minor)
VALUES ('ord_old', 't1', 'alice', 'CNY', 100);
"""


def test_a_database_set_up_before_the_schema_is_adopted_rows_and_all(
    create_database: Callable[[], str],
) -> None:
    url = create_database()
    apply_migrations(url, LEGACY)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(LEGACY_ROWS_SQL)
    setup_database(url)
    apply_migrations(url, SERVICE)
    apply_migrations(url, DEMO)
    for table, count in [
        ("writegate.proposals", 1),
        ("writegate.tokens", 1),
        ("writegate.executions", 1),
        ("writegate.audit", 1),
        ("writegate.api_keys", 1),
        ("public.orders", 1),
    ]:
        assert _scalar(url, f"SELECT count(*) FROM {table}") == count, table
    # The unknown execution is still there to reconcile, and the old call keyed as before.
    assert _scalar(url, "SELECT status FROM writegate.executions") == "unknown"
    assert _scalar(url, "SELECT message_id FROM writegate.proposals") == ""
    # Nothing of writegate's own is left in public; the demo's tables stay the app's.
    assert _tables(url, "public") == {"orders", "refunds", "tickets", "batch_items",
                                      "writegate_demo_migrations", *CHECKPOINT_TABLES}  # fmt: skip
    # adopted as 1, then the later ones run
    assert _versions(url, "writegate.migrations") == list(range(1, len(CORE.migrations) + 1))
    assert _versions(url, "writegate.service_migrations") == list(
        range(1, len(SERVICE.migrations) + 1)
    )
    assert _versions(url, "public.writegate_demo_migrations") == [1]
    assert _versions(url, "writegate.legacy_migrations") == list(range(1, 13))
    setup_database(url)  # and once more: nothing left to do
    # adopted as 1, then the later ones run
    assert _versions(url, "writegate.migrations") == list(range(1, len(CORE.migrations) + 1))


def test_a_database_at_another_old_version_is_refused_and_left_as_it_was(
    create_database: Callable[[], str],
) -> None:
    url = create_database()
    apply_migrations(url, MigrationList("legacy", LEGACY.table, LEGACY_MIGRATIONS[:8]))
    with pytest.raises(MigrationError, match="only version 12 is adopted"):
        setup_database(url)
    assert "wg_proposals" in _tables(url, "public")
    assert _scalar(url, "SELECT to_regnamespace('writegate') IS NULL") is True


def _tables(url: str, schema: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
        ).fetchall()
    return {r[0] for r in rows}


def test_an_adopted_database_has_every_object_a_fresh_one_has(
    create_database: Callable[[], str],
) -> None:
    fresh, adopted = create_database(), create_database()
    for url in (fresh, adopted):
        if url == adopted:
            apply_migrations(url, LEGACY)
        setup_database(url)
        apply_migrations(url, SERVICE)
    # The old layout's version table is kept, renamed; everything else is as fresh.
    kept = frozenset({"legacy_migrations"})
    want, got = (
        schema_objects(fresh, "writegate"),
        schema_objects(adopted, "writegate", leave_out=kept),
    )
    for kind in want:
        assert got[kind] == want[kind], (kind, want[kind] - got[kind], got[kind] - want[kind])
    assert {f[0] for f in got["functions"]} >= {"propose", "claim", "write_audit", "lock_proposal"}
    assert _tables(adopted, "writegate") - _tables(fresh, "writegate") == set(kept)


def test_a_database_adopted_by_an_earlier_main_is_made_good(
    create_database: Callable[[], str],
) -> None:
    """Adopted as the releases up to 0.1.0 adopted it (no functions, `wg_` names, core
    migrations 1-4): `NAME_AS_FRESH`, a later migration, makes good what it lacks."""
    fresh, adopted = create_database(), create_database()
    setup_database(fresh)
    apply_migrations(adopted, LEGACY)
    with psycopg.connect(adopted, autocommit=True) as conn:
        conn.execute(LEGACY_ROWS_SQL)
    assert CORE.legacy is not None
    marker, adoption = CORE.legacy
    earlier = MigrationList(
        CORE.name, CORE.table, CORE.migrations[:4], (marker, adoption.removesuffix(NAME_AS_FRESH))
    )
    apply_migrations(adopted, earlier)
    claim = "SELECT to_regproc('writegate.claim') IS NULL"
    assert _scalar(adopted, claim) is True  # what an upgrade from 5f1ffc8 ran into
    setup_database(adopted)
    kept = frozenset({"legacy_migrations"})
    want = schema_objects(fresh, "writegate")
    got = schema_objects(adopted, "writegate", leave_out=kept)
    for kind in want:
        assert got[kind] == want[kind], (kind, want[kind] - got[kind], got[kind] - want[kind])
    assert _scalar(adopted, "SELECT status FROM writegate.executions") == "unknown"  # rows kept


def test_the_release_that_migrated_each_list_is_recorded(
    create_database: Callable[[], str],
) -> None:
    url = create_database()
    setup_database(url)
    apply_migrations(url, SERVICE)
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT migrations, release, version FROM writegate.releases"
        ).fetchall()
    assert __version__ == RELEASE
    assert set(rows) == {
        ("writegate", __version__, len(CORE.migrations)),
        ("service", __version__, len(SERVICE.migrations)),
    }


def test_an_older_release_refuses_a_newer_database_naming_both_and_changes_nothing(
    create_database: Callable[[], str],
) -> None:
    url = create_database()
    newer = MigrationList(
        CORE.name, CORE.table, [*CORE.migrations, "CREATE TABLE writegate.later ()"]
    )
    apply_migrations(url, newer)
    with psycopg.connect(url, autocommit=True) as conn:  # as that newer release recorded it
        conn.execute("UPDATE writegate.releases SET release = '9.1.0'")
    before = _versions(url, "writegate.migrations")
    with pytest.raises(MigrationError) as refused:
        setup_database(url)
    message = str(refused.value)
    assert "writegate 9.1.0" in message and f"writegate {__version__}" in message, message
    assert "older than the database" in message and "\n" not in message
    assert _versions(url, "writegate.migrations") == before
    assert _scalar(url, "SELECT release FROM writegate.releases") == "9.1.0"
    assert _scalar(url, "SELECT to_regclass('public.checkpoints') IS NULL") is True


def test_db_status_shows_each_lists_versions_and_the_release(
    create_database: Callable[[], str],
) -> None:
    url = create_database()
    setup_database(url)
    env = {**os.environ, "DATABASE_URL": url, "NO_COLOR": "1", "COLUMNS": "200"}
    shown = subprocess.run(
        [sys.executable, "-m", "writegate", "db", "status"], env=env, capture_output=True, text=True
    )
    assert shown.returncode == 0, shown.stderr
    lines = {line.split()[0]: line for line in shown.stdout.splitlines() if line.strip()}
    assert f"writegate {__version__}" in lines["this"]
    n = len(CORE.migrations)
    assert f"migrations {n} of {n}; last migrated by writegate {__version__}" in lines["writegate"]
    s = len(SERVICE.migrations)
    assert f"migrations 0 of {s}; release not recorded; {s} to apply" in lines["service"]
    assert _scalar(url, "SELECT to_regclass('writegate.service_migrations') IS NULL") is True
