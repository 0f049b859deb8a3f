"""The forms the demo's provider and tools write: a digest of a value, and a moment.

A digest is `sha256:` and the hex SHA-256 of the value's RFC 8785 (JCS) bytes, the
form writegate's own digests take; a moment is RFC 3339 in UTC with a `Z`.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

import rfc8785


def digest(value: Any) -> str:
    """`sha256:` and the hex SHA-256 of `value`'s canonical JSON (RFC 8785)."""
    return "sha256:" + hashlib.sha256(rfc8785.dumps(value)).hexdigest()


def rfc3339(moment: datetime) -> str:
    """UTC, second precision unless there are microseconds, with a `Z` suffix."""
    utc = moment.astimezone(UTC)
    return utc.isoformat(timespec="microseconds" if utc.microsecond else "seconds").replace(
        "+00:00", "Z"
    )
