"""`writegate threads`: the conversations in the database and what waits on each.

Threads come from LangGraph's `checkpoints` table (the run config's user and tenant
are in each checkpoint's metadata); pending approvals come from writegate's ledger,
so a proposal made outside a chat (HTTP, MCP) is listed too, under its own thread.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from writegate.approval.errors import ValidationFailed
from writegate.approval.views import PageArgs
from writegate.checkpoints.database import describe_database
from writegate.surfaces.cli.admin import Cursor, Limit, OrderOption, print_next_cursor
from writegate.surfaces.cli.common import console, database_url, err_console
from writegate.surfaces.cli.terminal import clean, inert


def register(app: typer.Typer) -> None:
    app.command("threads")(threads)
    app.command("orphans")(orphans)


NewestFirst = Annotated[str, typer.Option("--order", help="newest (the default) or oldest first.")]


def orphans(
    end: Annotated[bool, typer.Option("--end", help="Cancel this page's (audited).")] = False,
    older_than: Annotated[
        int, typer.Option("--older-than", min=0, help="Only proposals older than this (minutes).")
    ] = 5,
    by: Annotated[
        str | None, typer.Option("--by", help="Who ends them, for the audit (default: you).")
    ] = None,
    limit: Limit = 100,
    cursor: Cursor = None,
    order: OrderOption = "oldest",
) -> None:
    """List approvals whose thread no longer asks them (ended or deleted outside
    writegate), a page at a time by when each was proposed, and with --end cancel that
    page's. Touches only writegate's tables."""
    import getpass
    from datetime import timedelta

    from writegate import Writegate
    from writegate.surfaces.cli.render import reported_errors

    grace = timedelta(minutes=older_than)
    page = PageArgs(limit=limit, cursor=cursor, order=order)  # type: ignore[arg-type]  # checked
    with reported_errors(err_console), Writegate.open(database_url(), tools=[]) as wg:
        operator = by or f"operator:{getpass.getuser()}"
        with refused():
            found = (
                wg.end_orphaned(operator, grace, page=page)
                if end
                else wg.orphaned(grace, page=page)
            )
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
    print_next_cursor(found.next_cursor)


@contextmanager
def refused() -> Iterator[None]:
    """A refused page (a bad cursor, order or limit) as a structured error, exit 1."""
    from writegate.surfaces.cli.render import error_panel

    try:
        yield
    except ValidationFailed as exc:
        err_console.print(error_panel(exc.to_dict()))
        raise typer.Exit(1) from exc


def threads(
    user: Annotated[str | None, typer.Option("--user", help="Only this user's threads.")] = None,
    tenant: Annotated[
        str | None, typer.Option("--tenant", help="Only this tenant's threads.")
    ] = None,
    limit: Limit = 50,
    cursor: Cursor = None,
    order: NewestFirst = "newest",
) -> None:
    """List threads and the approvals pending on each, a page at a time by when each
    thread began; the line after a page says how to ask for the next."""
    from writegate.checkpoints.pool import open_pool
    from writegate.checkpoints.schema import setup_database
    from writegate.checkpoints.views import LedgerViews
    from writegate.surfaces.cli.render import reported_errors

    url = database_url()
    page = PageArgs(limit=limit, cursor=cursor, order=order)  # type: ignore[arg-type]  # checked
    with reported_errors(err_console):
        setup_database(url)  # a fresh database has no tables yet; this is idempotent
        pool = open_pool(url, max_size=1)
    try:
        with refused():
            listed, pending = LedgerViews(pool).threads_page(page, user_id=user, tenant_id=tenant)
    finally:
        pool.close()
    rows = {row["thread_id"]: row for row in listed}
    console.print(threads_table(rows, pending, describe_database(url)))
    if pending:
        console.print(pending_table(pending))
    waiting = sum(1 for p in pending if not p["expired"])
    console.print(f"{len(rows)} thread(s), {waiting} pending approval(s)")
    print_next_cursor(listed.next_cursor)


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
