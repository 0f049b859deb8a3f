"""Schema additions for the tiers feature (one append-only migration entry)."""

from __future__ import annotations

# Filled in by the tiers work; a no-op until then. Once shipped, never edit: append instead.
TIERS = "SELECT 1"
