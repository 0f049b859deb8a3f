"""How long the ledger keeps its rows, and what is left when they go.

Finished executions (succeeded, failed for good) and proposals that ended without one
are purged after the retention period; open ones (running, unknown, escalated) never
are. Every purged request key leaves a tombstone: a late retry of a purged operation
(a replayed token, an old checkpoint resumed months later) is refused as
`record_expired`, never mistaken for a new request and executed again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from writegate.approval.errors import RecordExpired

RETENTION_ENV = "WRITEGATE_RETENTION_DAYS"
DEFAULT_RETENTION_DAYS = 90


@dataclass(frozen=True)
class Tombstone:
    """What remains of a purged operation: enough to refuse a late retry and say why."""

    request_key: str
    token_hash: str | None
    proposal_id: str
    tenant_id: str
    subject: str
    operation: str
    final_status: str
    execution_id: str | None
    provider_ref: str | None
    completed_at: datetime | None
    purged_at: datetime

    def refusal(self) -> RecordExpired:
        return RecordExpired(
            proposal_id=self.proposal_id,
            final_status=self.final_status,
            provider_ref=self.provider_ref,
            purged_at=self.purged_at.isoformat(),
        )


@dataclass(frozen=True)
class RetentionPolicy:
    """Ledger rows are kept `days` after they finished (0 keeps nothing finished)."""

    days: int = DEFAULT_RETENTION_DAYS

    def __post_init__(self) -> None:
        if self.days < 0:
            raise ValueError("retention days must be >= 0")

    @property
    def keep(self) -> timedelta:
        return timedelta(days=self.days)

    @classmethod
    def from_env(cls, environ: Any = None) -> RetentionPolicy:
        raw = (environ if environ is not None else os.environ).get(RETENTION_ENV, "").strip()
        if not raw:
            return cls()
        try:
            return cls(int(raw))
        except ValueError as exc:
            raise ValueError(f"{RETENTION_ENV} must be whole days, not {raw!r}") from exc
