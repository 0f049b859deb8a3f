"""Schema additions for the ops feature (one append-only migration entry)."""

from __future__ import annotations

# Filled in by the ops work; a no-op until then. Once shipped, never edit: append instead.
OPS = "SELECT 1"
