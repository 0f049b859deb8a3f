"""The `writegate` command's frame: `build_app` makes an app from the commands it is
given, and `run` runs one.

Each command module adds itself through `register(app)`; the composition point
(`writegate.console`) chooses the modules, their order, and the application the
commands serve, so nothing here names the demo or the bench. A command module holds
only what `--help` shows (the command, its options and help text): what a command
needs to run (the agent, LangGraph, a model client, LangGraph's saver) is imported
inside it when it runs, so `writegate --help`, `db` and `keys` never load the agent or
a model client.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib.metadata import version
from typing import Annotated

import psycopg
import typer

from writegate.approval.errors import WritegateError
from writegate.approval.policy import PolicyError
from writegate.approval.tracing_setup import configure_from_env
from writegate.checkpoints.database import DatabaseUnavailable
from writegate.checkpoints.migrate import MigrationError
from writegate.surfaces.cli.common import Register, err_console
from writegate.surfaces.cli.extras import MissingExtra
from writegate.surfaces.cli.terminal import markup_safe
from writegate.surfaces.served import Application, ToolsNotFound

__all__ = ["Register", "build_app", "run"]


def build_app(
    commands: Iterable[Register], *, application: Application | None = None
) -> typer.Typer:
    """A fresh `writegate` app with `commands`, in their order. `application`: the one
    whose tools the commands that are not its own serve on its database
    (`served_application`), if any."""
    app = typer.Typer(
        name="writegate",
        help="Safe write tools for LLM agents: propose, preview, confirm, execute at most once.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        context_settings={"obj": application},
    )
    app.callback()(_version_option)
    for register in commands:
        register(app)
    return app


def _print_version(asked: bool) -> None:
    if asked:
        print(f"writegate {version('writegate')}")  # the installed distribution's
        raise typer.Exit()


def _version_option(
    show: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print writegate's version and exit.",
            callback=_print_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    """Safe write tools for LLM agents: propose, preview, confirm, execute at most once."""


def run(app: typer.Typer) -> None:
    """Run `app`; a known error is one red line and exit status 2, never a traceback."""
    configure_from_env()  # tracing, only if OTEL_TRACES_EXPORTER asks for it
    try:
        app()
    except (
        DatabaseUnavailable,
        MigrationError,
        MissingExtra,
        PolicyError,
        ToolsNotFound,
        WritegateError,
    ) as exc:
        # escaped: a policy error names tables such as [points], which are not markup
        err_console.print(f"[red]error:[/red] {markup_safe(exc)}", soft_wrap=True)
        raise SystemExit(2) from exc
    except psycopg.OperationalError as exc:
        # the server went away or refused us mid-command: its first line, not a traceback
        first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        err_console.print(
            f"[red]error:[/red] the database connection failed ({markup_safe(first)}); "
            "check that PostgreSQL runs and DATABASE_URL is right",
            soft_wrap=True,
        )
        raise SystemExit(2) from exc
