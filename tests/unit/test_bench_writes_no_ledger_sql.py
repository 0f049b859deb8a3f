"""The bench writes no ledger row by hand, and reads none by hand either: its proposals,
tokens, executions and audit rows are written by the ledger store (`PgLedgerTx.load`)
and the approval service, read by the stores, and the statements it times and explains
are the product's own (`ViewsSQL`, `OpsSQL`, via `sql_for`). So no text in bench/ names
a table of writegate's schema, and a change of a ledger column is the product's to
follow: it cannot break the bench silently. Only the demo's tables (orders, refunds,
provider.refunds) are written and read there by hand."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = "writegate"
# The tables and views writegate creates in its schema, as the product's code creates them.
CREATED = re.compile(
    rf"""CREATE\s+(OR\s+REPLACE\s+)?(UNLOGGED\s+)?(TABLE|VIEW)\s+(IF\s+NOT\s+EXISTS\s+)?
         {SCHEMA}\.(?P<name>\w+)""",
    re.IGNORECASE | re.VERBOSE,
)

# A statement that writes a table, naming one in writegate's schema (quoted or not).
LEDGER_WRITE = re.compile(
    rf"""\b(INSERT\s+INTO|UPDATE|DELETE\s+FROM|TRUNCATE(\s+TABLE)?|COPY|MERGE\s+INTO)
         \s+(ONLY\s+)?"?{SCHEMA}"?\.""",
    re.IGNORECASE | re.VERBOSE,
)
# A writing statement with its table filled in later, and the ledger table it is given.
DYNAMIC_WRITE = re.compile(
    r"\b(INSERT\s+INTO|UPDATE|DELETE\s+FROM|TRUNCATE|COPY)\s+\{", re.IGNORECASE
)
LEDGER_TABLE_VALUE = re.compile(rf"""["']{SCHEMA}\.\w+["']""")


def ledger_writes(text: str) -> list[str]:
    """Each line of `text` that writes one of writegate's tables by hand."""
    found = [m.group(0) for m in LEDGER_WRITE.finditer(text)]
    if DYNAMIC_WRITE.search(text):
        found += [m.group(0) for m in LEDGER_TABLE_VALUE.finditer(text)]
    return found


def test_bench_writes_no_ledger_row_by_hand() -> None:
    files = sorted((ROOT / "bench").rglob("*.py"))
    assert files, "no bench/ beside the tests"
    offenders = {
        str(path.relative_to(ROOT)): hits
        for path in files
        if (hits := ledger_writes(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}, (
        "bench/ writes writegate's tables by hand; use the ledger store (PgLedgerTx.load) "
        f"or the approval service instead: {offenders}"
    )


def test_the_scan_finds_each_way_of_writing_a_ledger_table() -> None:
    assert ledger_writes("INSERT INTO writegate.proposals (proposal_id) VALUES (%s)")
    assert ledger_writes('UPDATE "writegate".executions SET status = %s')
    assert ledger_writes("delete from writegate.tokens where true")
    assert ledger_writes("TRUNCATE writegate.executions, writegate.tokens")
    assert ledger_writes("COPY writegate.audit FROM STDIN")
    assert ledger_writes('sql = "INSERT INTO {table} ..."; clone(conn, "writegate.tokens")')
    assert not ledger_writes("SELECT count(*) FROM writegate.executions")
    assert not ledger_writes("INSERT INTO orders (order_id) VALUES (%s)")
    assert not ledger_writes('sql = "INSERT INTO {table} ..."; clone(conn, "orders")')


def ledger_tables() -> set[str]:
    """Every table and view the product's code creates in writegate's schema."""
    skipped = {"bench", "tests", ".venv"}
    return {
        match.group("name")
        for path in ROOT.rglob("*.py")
        if not skipped & set(path.relative_to(ROOT).parts)
        for match in CREATED.finditer(path.read_text(encoding="utf-8"))
    }


def ledger_names(text: str, tables: set[str]) -> list[str]:
    """Each place `text` names one of `tables` in writegate's schema (quoted or not), in
    a statement that reads or writes it, or anywhere else."""
    names = "|".join(sorted(tables))
    pattern = re.compile(rf"""(?<![\w.])"?{SCHEMA}"?\."?({names})\b""", re.IGNORECASE)
    return [m.group(0).lstrip('"') for m in pattern.finditer(text)]


def test_bench_names_no_ledger_table() -> None:
    tables = ledger_tables()
    assert {"proposals", "tokens", "executions", "audit", "presented", "tombstones"} <= tables
    offenders = {
        str(path.relative_to(ROOT)): hits
        for path in sorted((ROOT / "bench").rglob("*.py"))
        if (hits := ledger_names(path.read_text(encoding="utf-8"), tables))
    }
    assert offenders == {}, (
        "bench/ names writegate's tables in its own SQL; read through the stores "
        "(PgLedgerStore, PgViews, PgBacklog) or run the product's own statements "
        f"(sql_for(LedgerSQL | OpsSQL | ViewsSQL, schema)) instead: {offenders}"
    )


def test_the_scan_finds_a_read_of_a_ledger_table() -> None:
    tables = {"proposals", "executions", "audit"}
    assert ledger_names("SELECT count(*) FROM writegate.executions", tables)
    assert ledger_names('SELECT * FROM "writegate"."proposals" WHERE true', tables)
    assert ledger_names("FROM writegate.audit a JOIN writegate.executions e ON", tables) == [
        "writegate.audit",
        "writegate.executions",
    ]
    assert ledger_names('groups = ("writegate.proposals",)', tables)
    assert not ledger_names("SELECT count(*) FROM provider.refunds", tables)
    assert not ledger_names("from writegate.approval.audit import call_audit", tables)
    assert not ledger_names("span('writegate.execute')", tables)
    assert not ledger_names("SELECT * FROM mywritegate.proposals", tables)
