"""The PostgreSQL schema that holds writegate's own tables, and SQL written for it.

Every table writegate creates for itself lives in one schema of its own (`writegate`
unless `Writegate.open(schema=...)` names another), so no name of a user's can
collide with one of writegate's. SQL is written once, plainly, with the default
schema's qualified names (`writegate.proposals`); a store for another schema gets the
same statements with that schema's name instead (`Statements`, `sql_for`). LangGraph's checkpoint
tables are not writegate's: they stay where `PostgresSaver` puts them, so they are
shared with a user who already runs it.
"""

from __future__ import annotations

import re
from functools import cache
from typing import TypeVar

DEFAULT_SCHEMA = "writegate"
_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_QUALIFIED = re.compile(rf"\b{DEFAULT_SCHEMA}\.")
S = TypeVar("S", bound="Statements")


def schema_name(name: str | None) -> str:
    """`name` (default: `writegate`) once it is a plain lower-case identifier: it is
    written into SQL as a name, never as a value, so nothing else is accepted."""
    name = DEFAULT_SCHEMA if name is None else name
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"schema {name!r}: use lower-case letters, digits and underscores, "
            "starting with a letter or underscore (at most 63 characters)"
        )
    return name


def for_schema(statement: str, schema: str) -> str:
    """`statement`, written for the default schema, for `schema` instead."""
    return statement if schema == DEFAULT_SCHEMA else _QUALIFIED.sub(schema + ".", statement)


class Statements:
    """A set of statements, written once for the default schema as class attributes
    named `..._SQL` (the way LangGraph's Postgres saver keeps its own), so mypy sees
    each one. An instance holds them for one schema, by the same names."""

    def __init__(self, schema: str = DEFAULT_SCHEMA) -> None:
        for name in dir(type(self)):
            value = getattr(type(self), name)
            if name.endswith("_SQL") and isinstance(value, str):
                setattr(self, name, for_schema(value, schema))


@cache
def sql_for(kind: type[S], schema: str) -> S:
    """`kind`'s statements for `schema` (one instance per schema)."""
    return kind(schema)
