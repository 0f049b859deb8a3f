"""The `writegate` command.

Subcommands live in small modules (`graph/cli_*.py`), each adding itself to `app`
through a `register(app)` function listed in `_COMMAND_MODULES` below.
"""

from __future__ import annotations

import importlib

import typer
from rich.console import Console

from writegate.approval.errors import WritegateError
from writegate.checkpoints.database import DatabaseUnavailable, describe_database, resolve_database_url
from writegate.checkpoints.migrate import MigrationError

app = typer.Typer(
    name="writegate",
    help="Safe write tools for LLM agents: propose, preview, confirm, execute at most once.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="Create and fill the database.", no_args_is_help=True)
app.add_typer(db_app, name="db")
console = Console()
err_console = Console(stderr=True)

_COMMAND_MODULES: list[str] = [
    "writegate.surfaces.cli.bench",
    "writegate.surfaces.cli.demo",
    "writegate.surfaces.cli.chat",
    "writegate.surfaces.cli.threads",
    "writegate.surfaces.cli.mcp",
    "writegate.surfaces.cli.ops",
    "writegate.surfaces.cli.serve",
    "writegate.surfaces.cli.admin",
]


def database_url() -> str:
    """Resolve the database or exit with the message that says what to set."""
    try:
        return resolve_database_url()
    except DatabaseUnavailable as exc:
        err_console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc


@db_app.command("setup")
def db_setup() -> None:
    """Apply migrations and create LangGraph's checkpoint tables (safe to re-run)."""
    from writegate.checkpoints.migrate import setup_database

    url = database_url()
    with console.status(f"Setting up {describe_database(url)} ..."):
        setup_database(url)
    console.print(f"[green]ok[/green] schema and checkpointer ready on {describe_database(url)}")


@db_app.command("seed")
def db_seed() -> None:
    """Load the demo tenant, users, orders and tickets (idempotent)."""
    from writegate.checkpoints.migrate import setup_database
    from writegate.checkpoints.pool import open_pool
    from writegate.tools.seed import seed_demo

    url = database_url()
    setup_database(url)
    pool = open_pool(url, max_size=1)
    try:
        with pool.connection() as conn, conn.transaction():
            seed_demo(conn)
    finally:
        pool.close()
    console.print(
        "[green]ok[/green] demo data: tenant_hz; user_42 owns ord_1001 (¥199.00) and "
        "tickets; user_7 owns ord_2002 (¥50.00)"
    )


def _load_commands() -> None:
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(app)


def main() -> None:
    _load_commands()
    try:
        app()
    except (DatabaseUnavailable, MigrationError, WritegateError) as exc:
        err_console.print(f"[red]error:[/red] {exc}")
        raise SystemExit(2) from exc


if __name__ == "__main__":
    main()
