"""Schema additions for the http feature (one append-only migration entry)."""

from __future__ import annotations

# Filled in by the http work; a no-op until then. Once shipped, never edit: append instead.
HTTP = "SELECT 1"
