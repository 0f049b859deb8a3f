"""`writegate threads`: the conversations in the database and what waits on each.

Threads come from LangGraph's `checkpoints` table (the run config's user and tenant
are in each checkpoint's metadata); pending approvals come from writegate's ledger,
so a proposal made outside a chat (HTTP, MCP) is listed too, under its own thread.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from writegate.checkpoints.database import describe_database
from writegate.surfaces.cli.common import console, database_url, err_console
from writegate.surfaces.cli.terminal import clean, inert


def register(app: typer.Typer) -> None:
    app.command("threads")(threads)
    app.command("orphans")(orphans)


def orphans(
    end: Annotated[bool, typer.Option("--end", help="Cancel them (audited).")] = False,
    older_than: Annotated[
        int, typer.Option("--older-than", min=0, help="Only proposals older than this (minutes).")
    ] = 5,
    by: Annotated[
        str | None, typer.Option("--by", help="Who ends them, for the audit (default: you).")
    ] = None,
) -> None:
    """List approvals whose thread no longer asks them (ended or deleted outside
    writegate), and with --end cancel them. Touches only writegate's tables."""
    import getpass
    from datetime import timedelta

    from writegate import Writegate
    from writegate.surfaces.cli.render import reported_errors

    grace = timedelta(minutes=older_than)
    with reported_errors(err_console), Writegate.open(database_url(), tools=[]) as wg:
        operator = by or f"operator:{getpass.getuser()}"
        found = wg.end_orphaned(operator, grace) if end else wg.orphaned(grace)
    table = Table(title="orphaned approvals", title_justify="left", header_style="bold")
    for column in ("thread", "proposal", "what", "user", "tenant"):
        table.add_column(column, no_wrap=True)
    for view in found:
        table.add_row(
            inert(view.thread_id),
            inert(view.proposal_id),
            inert(view.operation),
            inert(view.requested_by),
            inert(view.tenant_id),
        )
    console.print(table)
    verb = f"cancelled by {clean(operator)}" if end else "found (--end cancels them)"
    console.print(inert(f"{len(found)} orphaned approval(s) {verb}"))


def threads(
    user: Annotated[str | None, typer.Option("--user", help="Only this user's threads.")] = None,
    tenant: Annotated[
        str | None, typer.Option("--tenant", help="Only this tenant's threads.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many.")] = 50,
) -> None:
    """List threads and the approvals pending on each."""
    from writegate.checkpoints.pool import open_pool
    from writegate.checkpoints.schema import setup_database
    from writegate.checkpoints.views import LedgerViews
    from writegate.surfaces.cli.render import reported_errors

    url = database_url()
    params: dict[str, Any] = {"user_id": user, "tenant_id": tenant, "limit": limit}
    with reported_errors(err_console):
        setup_database(url)  # a fresh database has no tables yet; this is idempotent
        pool = open_pool(url, max_size=1)
    try:
        listed, pending = LedgerViews(pool).threads_with_pending(**params)
    finally:
        pool.close()
    rows = _thread_rows(listed, pending)
    console.print(threads_table(rows, pending, describe_database(url)))
    if pending:
        console.print(pending_table(pending))
    waiting = sum(1 for p in pending if not p["expired"])
    console.print(f"{len(rows)} thread(s), {waiting} pending approval(s)")


def _thread_rows(listed: list[Any], pending: list[Any]) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {r["thread_id"]: dict(r) for r in listed}
    for proposal in pending:  # a thread known only to the ledger still shows its approvals
        rows.setdefault(
            proposal["thread_id"],
            {"thread_id": proposal["thread_id"], "user_id": proposal["subject"],
             "tenant_id": proposal["tenant_id"], "checkpoints": 0, "updated_at": None},
        )  # fmt: skip
    return rows


def threads_table(rows: dict[str, dict[str, Any]], pending: list[Any], where: str) -> Table:
    waiting: dict[str, int] = defaultdict(int)
    for proposal in pending:
        waiting[proposal["thread_id"]] += 0 if proposal["expired"] else 1
    table = Table(title=inert(f"threads on {where}"), title_justify="left", header_style="bold")
    for column in ("thread", "user", "tenant", "last activity", "pending"):
        table.add_column(column, no_wrap=True)
    for thread_id, row in rows.items():
        count = waiting.get(thread_id, 0)
        table.add_row(
            inert(thread_id),
            inert(row["user_id"] or ""),
            inert(row["tenant_id"] or ""),
            inert(str(row["updated_at"] or "")[:19].replace("T", " ")),
            Text(str(count), style="bold yellow") if count else Text("0", style="dim"),
        )
    return table


def pending_table(pending: list[Any]) -> Table:
    table = Table(title="pending approvals", title_justify="left", header_style="bold")
    for column in ("thread", "proposal", "what", "status", "expires"):
        table.add_column(column, no_wrap=column in ("thread", "proposal"), overflow="fold")
    for proposal in pending:
        preview = proposal["preview"] or {}
        status = "expired (not yet swept)" if proposal["expired"] else proposal["status"]
        table.add_row(
            inert(proposal["thread_id"]),
            inert(proposal["proposal_id"]),
            inert(preview.get("title") or proposal["operation"]),
            inert(status, style="dim" if proposal["expired"] else "yellow"),
            inert(proposal["expires_at"].strftime("%Y-%m-%d %H:%M:%S %Z")),
        )
    return table
