"""What every command module shares: the consoles and database resolution."""

from __future__ import annotations

import typer
from rich.console import Console

from writegate.checkpoints.database import DatabaseUnavailable, resolve_database_url
from writegate.surfaces.cli.terminal import markup_safe

console = Console()
err_console = Console(stderr=True)


def database_url() -> str:
    """Resolve the database or exit with the message that says what to set."""
    try:
        return resolve_database_url(
            check_url=True,
            notify=lambda message: err_console.print(f"[dim]{markup_safe(message)}[/dim]"),
        )
    except DatabaseUnavailable as exc:
        err_console.print(f"[red]error:[/red] {markup_safe(exc)}", soft_wrap=True)
        raise typer.Exit(2) from exc
