"""The migration runner: idempotent, append-only, safe from parallel processes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from langgraph.checkpoint.postgres import PostgresSaver

from writegate.checkpoints.migrate import MigrationError, apply_migrations, migration_checksum
from writegate.checkpoints.schema import MIGRATIONS

ROOT = Path(__file__).resolve().parents[2]
TABLE = "test_migrations_log"
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
    assert apply_migrations(url, TEST_MIGRATIONS, table=TABLE) == 3
    assert apply_migrations(url, TEST_MIGRATIONS, table=TABLE) == 0
    assert _versions(url) == [1, 2, 3]
    assert _scalar(url, "SELECT count(*) FROM mig_items") == 1

    more = [*TEST_MIGRATIONS, "CREATE TABLE mig_third (y integer)"]
    with psycopg.connect(url, autocommit=True) as conn:
        assert apply_migrations(conn, more, table=TABLE) == 1
    assert _versions(url) == [1, 2, 3, 4]
    checksum = _scalar(url, f"SELECT checksum FROM {TABLE} WHERE version = 4")
    assert checksum == migration_checksum(more[3])


def test_edited_or_unknown_history_is_refused(create_database: Callable[[], str]) -> None:
    url = create_database()
    apply_migrations(url, TEST_MIGRATIONS, table=TABLE)
    edited = [*TEST_MIGRATIONS]
    edited[1] = "ALTER TABLE mig_items ADD COLUMN label text"
    with pytest.raises(MigrationError, match="append-only"):
        apply_migrations(url, edited, table=TABLE)
    with pytest.raises(MigrationError, match="older than the database"):
        apply_migrations(url, TEST_MIGRATIONS[:2], table=TABLE)
    # Whitespace-only edits are not changes.
    reindented = [m.replace(" ", "  ") for m in TEST_MIGRATIONS]
    assert apply_migrations(url, reindented, table=TABLE) == 0


def test_failed_migration_applies_nothing(create_database: Callable[[], str]) -> None:
    url = create_database()
    broken = [*TEST_MIGRATIONS, "CREATE TABLE mig_bad (", "CREATE TABLE mig_never (z int)"]
    apply_migrations(url, TEST_MIGRATIONS[:1], table=TABLE)
    with pytest.raises(MigrationError, match="migration 4"):
        apply_migrations(url, broken, table=TABLE)
    assert _versions(url) == [1]
    assert _scalar(url, "SELECT to_regclass('mig_other') IS NULL") is True


def test_refuses_connection_inside_transaction(create_database: Callable[[], str]) -> None:
    url = create_database()
    with psycopg.connect(url) as conn:
        conn.execute("SELECT 1")  # not autocommit: a transaction is now open
        with pytest.raises(MigrationError, match="no transaction open"):
            apply_migrations(conn, TEST_MIGRATIONS, table=TABLE)


@pytest.mark.slow
def test_parallel_processes_apply_each_version_once(create_database: Callable[[], str]) -> None:
    url = create_database()
    code = (
        "import json, sys\n"
        "from checkpoints.migrate import apply_migrations\n"
        f"print(apply_migrations({url!r}, json.loads({json.dumps(TEST_MIGRATIONS)!r}),"
        f" table={TABLE!r}))\n"
    )
    counts = [int(out) for out in _run_parallel(code, 4)]
    assert sorted(counts) == [0, 0, 0, 3]
    assert _versions(url) == [1, 2, 3]
    assert _scalar(url, "SELECT count(*) FROM mig_items") == 1


@pytest.mark.slow
def test_parallel_setup_database(create_database: Callable[[], str]) -> None:
    url = create_database()
    code = f"from checkpoints.migrate import setup_database\nsetup_database({url!r})\n"
    _run_parallel(code, 3)
    _assert_fully_set_up(url)


def test_database_url_fixture_is_set_up(database_url: str) -> None:
    _assert_fully_set_up(database_url)


def _assert_fully_set_up(url: str) -> None:
    assert _versions(url, "writegate_migrations") == list(range(1, len(MIGRATIONS) + 1))
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


# The checksums of the migrations that have shipped. Appending is how the schema changes:
# a new entry gets a new line here; an edited old entry fails this test.
SHIPPED_CHECKSUMS = [
    "ed1d2e34c3befb1b4db9495d1ef4e72c9b3790065901e137b64197b2c2d52dc4",
    "1c22fc4ee78538d9e7a8f52d7ee160f0229c8dc246f85b32a3bdaa32929a7589",
    "e7242d46f8dabc4e003e20233248a70b099a08e750bca7dc4e9f643be2aa5241",
    "51d75795aeaace28b350742d44bd12fd9f6556a35f4e66b56c81f7c7bd0fa9c7",
    "842b319c776bc8c9625d7d353f135d4d0021c9e19fa558a39c33cb8277f4f315",
    "0680b19a7948c9298722f87fe42e47044fb5178dfe6a013a32d5fb211efee3a6",
    "620129ca573e3a436d8c5d78eeba46a754b69efca8992930ceeaa7462f846e38",
    "2752dd17e90d4d66e5c8087f5f092af96bbddf9234a8aca2173afad967def4c6",
    "1945b8aeab50245dbede88372fa7a173a669331c214870c65118491a00a0ee14",
    "1fd398116416fe39e9c9ab8459a0c5e89aa4f5365676b34bcfe85ef430b55cbe",
    "e690220dc7af1c0d2ada02e6d56be5a6e8393bed2806a3aabd2886c85057ce3e",
    "faabece9418a09adac8693f8e327388f6770af3b07ab0fbefa0f1d7e17f2f6ec",
]


def test_shipped_migrations_are_never_edited() -> None:
    shipped = [migration_checksum(m) for m in MIGRATIONS[: len(SHIPPED_CHECKSUMS)]]
    assert shipped == SHIPPED_CHECKSUMS
    assert len(MIGRATIONS) >= len(SHIPPED_CHECKSUMS)


@pytest.mark.parametrize("old_version", [1, 4, 7])
def test_an_older_database_upgrades_in_place_keeping_its_rows(
    create_database: Callable[[], str], old_version: int
) -> None:
    """A database made by an older release (its first migrations only, with data in it)
    is brought to the current schema by setup, and keeps what it held."""
    from writegate.checkpoints.migrate import setup_database

    url = create_database()
    apply_migrations(url, MIGRATIONS[:old_version], table="writegate_migrations")
    with psycopg.connect(url) as conn:
        conn.execute(
            "INSERT INTO wg_audit (tenant_id, user_id, tool_name, event, status, duration_ms) "
            "VALUES ('t_old', 'u_old', 'get_order', 'read', 'ok', 1)"
        )
    setup_database(url)
    assert _versions(url, "writegate_migrations") == list(range(1, len(MIGRATIONS) + 1))
    assert _scalar(url, "SELECT count(*) FROM wg_audit WHERE tenant_id = 't_old'") == 1
    setup_database(url)  # and once more: nothing left to apply
    assert _versions(url, "writegate_migrations") == list(range(1, len(MIGRATIONS) + 1))


OLD_PROPOSAL_SQL = """
INSERT INTO wg_proposals (proposal_id, thread_id, tool_call_id, subject, tenant_id,
    operation, resource, args, args_digest, fingerprint, state_version, preview,
    policy_version, request_key, status, created_at, expires_at)
VALUES (%s, 't', %s, 'alice', 't1', 'pay', 'account:a', '{}', 'sha256:x', 'sha256:y', 0,
    '{}', 'p1', %s, 'awaiting_confirmation', now(), now() + interval '1 hour')"""
DIGEST_SCHEMES_SQL = "SELECT proposal_id, digest_scheme FROM wg_proposals ORDER BY proposal_id"


def test_rows_from_before_the_digest_scheme_are_marked_legacy_and_new_rows_jcs(
    create_database: Callable[[], str],
) -> None:
    url = create_database()
    apply_migrations(url, MIGRATIONS[:8])  # the schema before migration 9
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(OLD_PROPOSAL_SQL, ("prop_old", "c_old", "k_old"))
        apply_migrations(conn, MIGRATIONS)
        conn.execute(OLD_PROPOSAL_SQL, ("prop_new", "c_new", "k_new"))  # a writer naming no scheme
        rows = conn.execute(DIGEST_SCHEMES_SQL).fetchall()
    assert rows == [("prop_new", "jcs-sha256"), ("prop_old", "wg-c14n-1")]
