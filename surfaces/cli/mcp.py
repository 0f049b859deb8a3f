"""`writegate mcp` (serve the MCP server) and `writegate confirm` (a person confirms on a terminal).

`confirm` is the way to a token for MCP clients that cannot elicit: the person runs it,
reads the stored preview and types their answer; the token is printed once. It insists
on a terminal so that a confirmation is typed by someone, not piped in by a program.
It needs no `[mcp]` extra: it reads and decides through the approval service, and its
preview lines (shared with the MCP elicitation) import nothing of MCP.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from writegate.approval.canonical import to_rfc3339
from writegate.approval.decisions import Cancel, Confirm, Decline
from writegate.approval.errors import WritegateError
from writegate.approval.models import Proposal
from writegate.approval.service import Confirmation
from writegate.surfaces.cli.common import served_application
from writegate.surfaces.cli.extras import needs_extra
from writegate.surfaces.cli.terminal import clean

if TYPE_CHECKING:
    from writegate.surfaces.served import Application

TRANSPORTS = ("stdio", "http")


def _serve(
    application: Application | None,
    transport: str,
    host: str,
    port: int,
    user: str | None,
    tenant: str | None,
) -> None:
    import anyio

    from writegate.surfaces.cli.common import database_url
    from writegate.surfaces.served import open_served
    from writegate.surfaces.store import setup_service

    with needs_extra("mcp", "mcp"):
        import uvicorn

        from writegate.surfaces.mcp_server.identity import KeyRing, configured_identity
        from writegate.surfaces.mcp_server.server import WritegateMCP

    if transport not in TRANSPORTS:
        raise typer.BadParameter(f"use one of {', '.join(TRANSPORTS)}", param_hint="--transport")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    if transport == "http" and (user or tenant):
        raise typer.BadParameter(
            "over HTTP the identity comes from bearer keys (API keys or WRITEGATE_MCP_KEYS)",
            param_hint="--user/--tenant",
        )
    identity = configured_identity(user, tenant) if transport == "stdio" else None
    runtime = open_served(database_url(), application=application)
    setup_service(runtime.url)  # the keys
    keys = KeyRing.from_env(runtime.pool) if transport == "http" else None
    try:
        server = WritegateMCP(runtime, identity=identity, keys=keys)
        if transport == "stdio":
            anyio.run(server.serve_stdio)
        else:
            app = server.http_app(host)
            print(f"writegate MCP on http://{host}:{port}/mcp", file=sys.stderr, flush=True)
            uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        runtime.close()


def print_confirm_preview(proposal: Proposal) -> None:
    """The preview, each line cleaned: no value can redraw or add a line of its own."""
    from writegate.surfaces.confirm_text import confirm_lines

    for line in confirm_lines(proposal):
        print(clean(line))
    sys.stdout.flush()


def _confirm(application: Application | None, proposal_id: str, user: str, tenant: str) -> None:
    from rich.console import Console

    from writegate.approval.models import Identity, ProposalStatus
    from writegate.surfaces.cli.common import database_url
    from writegate.surfaces.confirm_text import retype_ask
    from writegate.surfaces.served import open_served

    err = Console(stderr=True)
    if not sys.stdin.isatty():
        err.print("[red]error:[/red] run `writegate confirm` yourself, in a terminal")
        raise typer.Exit(2)
    identity = Identity(user_id=user, tenant_id=tenant)
    with open_served(database_url(), application=application) as runtime:
        proposal = runtime.service.get_proposal(identity, proposal_id)
        if proposal.status not in (ProposalStatus.AWAITING, ProposalStatus.CONFIRMED):
            # (awaiting a second approver, decided or ended: nothing to confirm here)
            err.print(f"[red]error:[/red] this proposal is {proposal.status.value}")
            raise typer.Exit(1)
        print_confirm_preview(proposal)
        answer = input("Type 'yes' to confirm, 'no' to decline, 'cancel' to cancel: ")
        answer = answer.strip().lower()
        decision: Confirm | Decline | Cancel
        if answer == "yes":
            decision = Confirm(action="confirm", proposal_id=proposal_id)
            ask = retype_ask(proposal)
            if ask:  # this proposal's tier asks the person to re-type a key value
                field, hint = clean(ask["retype_field"]), clean(ask.get("retype_hint", ""))
                retyped = input(f"Re-type {field} ({hint}): ")
                decision = Confirm.model_validate(
                    {"action": "confirm", "proposal_id": proposal_id, "retyped": retyped}
                )
        elif answer == "no":
            decision = Decline(action="decline", proposal_id=proposal_id)
        elif answer == "cancel":
            decision = Cancel(action="cancel", proposal_id=proposal_id)
        else:
            err.print("nothing decided")
            raise typer.Exit(1)
        outcome = runtime.service.decide(identity, decision)
    if isinstance(outcome, Confirmation):
        print(f"Confirmed. One-time token (shown once, until {to_rfc3339(outcome.expires_at)}):")
        print(outcome.token, flush=True)
    elif decision.action == "confirm":
        print("Confirmed. A second approver must approve before a token is issued.")
    else:
        print(f"Recorded: {decision.action}.")


def register(app: typer.Typer) -> None:
    @app.command("mcp")
    def mcp(
        ctx: typer.Context,
        transport: Annotated[str, typer.Option(help="stdio or http (streamable HTTP)")] = "stdio",
        host: Annotated[str, typer.Option(help="HTTP bind address (loopback)")] = "127.0.0.1",
        port: Annotated[int, typer.Option(help="HTTP port")] = 8765,
        user: Annotated[str | None, typer.Option(help="stdio identity (or WRITEGATE_USER)")] = None,
        tenant: Annotated[
            str | None, typer.Option(help="stdio tenant (or WRITEGATE_TENANT)")
        ] = None,
    ) -> None:
        """Serve writegate's tools to any MCP client (propose, confirm, execute once)."""
        _serve(served_application(ctx), transport, host, port, user, tenant)

    @app.command("confirm")
    def confirm(
        ctx: typer.Context,
        proposal_id: Annotated[str, typer.Argument(help="The proposal to decide")],
        user: Annotated[str, typer.Option(help="Your user id")],
        tenant: Annotated[str, typer.Option(help="Your tenant id")],
    ) -> None:
        """Show a proposal's preview and confirm it yourself; prints a one-time token."""
        try:
            _confirm(served_application(ctx), proposal_id, user, tenant)
        except WritegateError as exc:
            typer.echo(clean(f"error: {exc.code}: {exc.message}"), err=True)
            raise typer.Exit(2) from exc
