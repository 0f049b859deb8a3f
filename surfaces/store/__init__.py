"""The HTTP service's and the MCP server's own tables and what reads and writes them:
API keys, thread ownership, click records, thread locks, stream events. Their migration
list is their own (`surfaces/store/schema.py`); the ledger's tables are the core's
(`checkpoints/schema.py`), read here only through `checkpoints/views.py`."""

from __future__ import annotations


def setup_service(url: str) -> None:
    """The service's tables (idempotent, safe from many processes at once)."""
    from writegate.checkpoints.migrate import apply_migrations
    from writegate.surfaces.store.schema import SERVICE

    apply_migrations(url, SERVICE)
