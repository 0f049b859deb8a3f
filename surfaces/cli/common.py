"""What every command module shares: the consoles, database resolution, and the
application the command was composed with."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from writegate.checkpoints.database import DatabaseUnavailable, resolve_database_url
from writegate.surfaces.cli.terminal import markup_safe

if TYPE_CHECKING:
    from writegate.surfaces.served import Application

# A module's (or an application's) way of adding its commands to an app or a group.
Register = Callable[[typer.Typer], None]

# With no terminal anywhere (output piped, no COLUMNS), rich would assume 80 columns
# and split table cells; lay out this wide instead, and never wrap plain lines.
UNBOUNDED_WIDTH = 240


def output_width() -> int | None:
    """None when rich can learn the width itself (COLUMNS, or any standard stream is a
    terminal, e.g. `writegate demo | less`); else `UNBOUNDED_WIDTH`."""
    if os.environ.get("COLUMNS", "").strip().isdigit():
        return None
    for stream in (sys.__stdout__, sys.__stderr__, sys.__stdin__):
        try:
            os.get_terminal_size(stream.fileno())  # type: ignore[union-attr]
        except (AttributeError, OSError, ValueError):
            continue
        return None
    return UNBOUNDED_WIDTH


def _console(*, stderr: bool = False) -> Console:
    width = output_width()
    return Console(stderr=stderr, width=width, soft_wrap=width is not None)


console = _console()
err_console = _console(stderr=True)


def database_url(*, create: bool = False) -> str:
    """Resolve the database or exit with the message that says what to set. A
    DATABASE_URL naming a missing database is refused unless `create` (`db setup`)."""
    try:
        return resolve_database_url(
            check_url=True,
            create=create,
            # one line each, however wide: what was created or started, and where
            notify=lambda message: err_console.print(
                f"[dim]{markup_safe(message)}[/dim]", soft_wrap=True
            ),
        )
    except DatabaseUnavailable as exc:
        err_console.print(f"[red]error:[/red] {markup_safe(exc)}", soft_wrap=True)
        raise typer.Exit(2) from exc


def served_application(ctx: typer.Context) -> Application | None:
    """The application the `writegate` command was composed with (`build_app`), which
    the commands that are not its own serve on its database; None for an app built
    without one. Every subcommand's context inherits it from the top one."""
    application: Application | None = ctx.obj
    return application
