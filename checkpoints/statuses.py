"""The protocol's status sets as SQL lists, built from the one place they are defined.

Query text keeps `status IN ('a', 'b')` so that the planner can match the partial
indexes; the lists come from approval/models.py's sets, in the enums' order. Migrations
keep their literal lists: they are history and never change.
"""

from __future__ import annotations

from collections.abc import Set
from enum import StrEnum

from writegate.approval.models import OPEN_EXECUTION, PENDING, RECONCILABLE


def sql_list(statuses: Set[StrEnum]) -> str:
    """`'a', 'b'` in the enum's own order: the values are constants, never user input."""
    enum = type(next(iter(statuses)))
    return ", ".join(f"'{status.value}'" for status in enum if status in statuses)


PENDING_SQL = sql_list(PENDING)
RECONCILABLE_SQL = sql_list(RECONCILABLE)
OPEN_EXECUTION_SQL = sql_list(OPEN_EXECUTION)
