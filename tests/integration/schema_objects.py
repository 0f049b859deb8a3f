"""A schema's objects, as the catalog describes them, to compare two databases: one
set up fresh, one adopted from an earlier layout. Names and definitions, never the
order of columns (a table's column order cannot change in place, and nothing here
reads a row by position)."""

from __future__ import annotations

from typing import Any

import psycopg

QUERIES = {
    "relations": """
        SELECT c.relname, c.relkind FROM pg_class c
        WHERE c.relnamespace = %(schema)s::regnamespace AND c.relkind IN ('r', 'v', 'S')""",
    "columns": """
        SELECT table_name, column_name, data_type, is_nullable, column_default
        FROM information_schema.columns WHERE table_schema = %(schema)s""",
    "constraints": """
        SELECT c.conrelid::regclass::text, c.conname, pg_get_constraintdef(c.oid)
        FROM pg_constraint c WHERE c.connamespace = %(schema)s::regnamespace""",
    "indexes": """
        SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = %(schema)s""",
    "functions": """
        SELECT p.proname, pg_get_function_identity_arguments(p.oid),
               pg_get_function_result(p.oid), l.lanname, md5(p.prosrc)
        FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
        WHERE p.pronamespace = %(schema)s::regnamespace""",
    "views": """
        SELECT c.relname, pg_get_viewdef(c.oid) FROM pg_class c
        WHERE c.relnamespace = %(schema)s::regnamespace AND c.relkind = 'v'""",
}


def schema_objects(
    url: str, schema: str, *, leave_out: frozenset[str] = frozenset()
) -> dict[str, set[tuple[Any, ...]]]:
    """Every object of `schema`, by kind; rows naming a table in `leave_out` are left out."""
    found: dict[str, set[tuple[Any, ...]]] = {}
    with psycopg.connect(url) as conn:
        for kind, query in QUERIES.items():
            rows = conn.execute(query, {"schema": schema}).fetchall()
            found[kind] = {
                tuple(r) for r in rows if not ({str(r[0]), str(r[0]).split(".")[-1]} & leave_out)
            }
    return found
