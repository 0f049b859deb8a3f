"""`writegate approve`, `writegate revoke`, `writegate approvals`: decisions by others.

A second approver sees the same preview the requester saw (the same interrupt payload,
rendered the same way), plus the confirmation tier and why it applies, and approves or
declines it. An approver, an admin or the requester revokes an approval that has not
executed. This console is an operator tool: whoever runs it states who they are with
`--user/--tenant` and the roles they act in with `--role`; hosts with a real sign-in
call `Executor.approve_as_second` (which runs the write) / `revoke` with identities
from their session.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from writegate.approval.canonical import to_rfc3339
from writegate.approval.errors import WritegateError
from writegate.approval.models import Identity, Proposal
from writegate.approval.views import PageArgs
from writegate.surfaces.cli.common import console, database_url, served_application
from writegate.surfaces.cli.terminal import inert, markup_safe

if TYPE_CHECKING:  # the runtime brings the agent; it loads when a command runs
    from writegate.runtime.wiring import Runtime

User = Annotated[str, typer.Option("--user", help="Who you are (user id).")]
Tenant = Annotated[str, typer.Option("--tenant", help="Your tenant id.")]
Roles = Annotated[
    list[str] | None,
    typer.Option("--role", help="A role you act in (repeatable); default: approver."),
]

Limit = Annotated[int, typer.Option("--limit", min=1, max=1000, help="At most this many.")]
Cursor = Annotated[
    str | None, typer.Option("--cursor", help="The next page, as the last one printed it.")
]
OrderOption = Annotated[str, typer.Option("--order", help="oldest (the default) or newest first.")]


def register(app: typer.Typer) -> None:
    app.command("approve")(approve)
    app.command("revoke")(revoke)
    app.command("approvals")(approvals)


def _identity(user: str, tenant: str, roles: list[str] | None) -> Identity:
    return Identity(user, tenant, frozenset(roles if roles is not None else ["approver"]))


@contextmanager
def _runtime(ctx: typer.Context) -> Iterator[Runtime]:
    """A runtime whose refusals print as a structured error and exit 1, never a trace."""
    from writegate.surfaces.cli.render import error_panel
    from writegate.surfaces.served import open_served

    runtime = open_served(database_url(), application=served_application(ctx))
    try:
        yield runtime
    except WritegateError as exc:
        console.print(error_panel(exc.to_dict()))
        raise typer.Exit(1) from exc
    finally:
        runtime.close()


def confirmation_table(proposal: Proposal) -> Table:
    """Who asked, the tier and its reasons, and where the approval stands."""
    block: dict[str, Any] = proposal.preview.get("confirmation") or {}
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column()
    table.add_row("requested by", inert(f"{proposal.subject} ({proposal.tenant_id})"))
    table.add_row("status", inert(proposal.status.value))
    table.add_row("tier", inert(f"{proposal.tier} (policy {proposal.policy_version})"))
    for reason in block.get("reasons", []):
        table.add_row("", inert(f"• {reason}"))
    if proposal.second_approver:
        table.add_row("second approver", inert(proposal.second_approver))
    if proposal.revoked_by:
        table.add_row("revoked by", inert(proposal.revoked_by))
    return table


def _show(proposal: Proposal) -> None:
    from writegate.approval.wire import approval_request
    from writegate.surfaces.cli.render import preview_table

    console.print(preview_table(approval_request(proposal)))
    console.print(confirmation_table(proposal))


def approve(
    ctx: typer.Context,
    proposal_id: Annotated[str, typer.Argument(help="The proposal to approve.")],
    user: User,
    tenant: Tenant,
    role: Roles = None,
    yes: Annotated[bool, typer.Option("--yes", help="Approve without asking.")] = False,
    decline: Annotated[bool, typer.Option("--decline", help="Decline instead.")] = False,
) -> None:
    """Second approval: see the requester's exact preview, then approve or decline it."""
    identity = _identity(user, tenant, role)
    with _runtime(ctx) as runtime:
        service = runtime.service
        _show(service.proposal_for_review(identity, proposal_id))
        verb = "Decline" if decline else "Approve"
        if not yes and not typer.confirm(f"{verb} exactly this operation?", default=False):
            console.print("nothing decided")
            raise typer.Exit(1)
        if decline:
            done = service.decline_as_second(identity, proposal_id)
        else:
            approved = runtime.executor.approve_as_second(identity, proposal_id)
            done = approved.proposal
        pid, status = markup_safe(proposal_id), markup_safe(done.status.value)
        console.print(f"[green]ok[/green] {pid} is now [bold]{status}[/bold]")
        if not decline:  # the approval ran it, for the requester: say how that ended
            console.print(inert(json.dumps(approved.outcome_body(), default=str)))


def revoke(
    ctx: typer.Context,
    proposal_id: Annotated[str, typer.Argument(help="The approval to revoke.")],
    user: User,
    tenant: Tenant,
    role: Roles = None,
) -> None:
    """Revoke an approval that has not executed (approver, admin or the requester)."""
    identity = _identity(user, tenant, role)
    with _runtime(ctx) as runtime:
        done = runtime.service.revoke(identity, proposal_id)
        _show(done)
        pid = markup_safe(proposal_id)
        console.print(f"[green]ok[/green] {pid} is revoked; executing it now fails")


def approvals(
    ctx: typer.Context,
    user: User,
    tenant: Tenant,
    role: Roles = None,
    limit: Limit = 100,
    cursor: Cursor = None,
    order: OrderOption = "oldest",
) -> None:
    """List the proposals of your tenant waiting for a second approval, a page at a time."""
    identity = _identity(user, tenant, role)
    with _runtime(ctx) as runtime:
        page = PageArgs(limit=limit, cursor=cursor, order=order)  # type: ignore[arg-type]  # checked
        waiting = runtime.service.awaiting_second_approval(identity, page)
    console.print(approvals_table(waiting, tenant))
    print_next_cursor(waiting.next_cursor)


def print_next_cursor(cursor: str | None, out: Console = console) -> None:
    """The line after a page: how to ask for the next one, or that this was the last."""
    if cursor is None:
        out.print("last page")
    else:
        out.print(inert(f"next page: --cursor {cursor}"), soft_wrap=True)


def approvals_table(waiting: list[Proposal], tenant: str) -> Table:
    table = Table(title=inert(f"awaiting second approval in {tenant}"), title_justify="left")
    for column in ("proposal", "requested by", "operation", "tier", "expires"):
        table.add_column(column, no_wrap=True)
    for p in waiting:
        cells = (p.proposal_id, p.subject, p.operation, p.tier, to_rfc3339(p.expires_at))
        table.add_row(*(inert(cell) for cell in cells))
    return table
