"""The bench writes no ledger row by hand: its proposals, tokens, executions and audit
rows are written by the ledger store (`PgLedgerTx.load`) and the approval service, so a
change of a ledger column is the store's to follow and cannot break the bench silently.
Reading the ledger (plans, probes, checks) is allowed."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = "writegate"

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
