"""`writegate db`: create the schema and say where it stands; an application adds its
own commands to the group (the demo's `db seed` and `db reset`, `writegate.demo.cli`)."""

from __future__ import annotations

from collections.abc import Iterable

import typer

from writegate.checkpoints.database import describe_database
from writegate.surfaces.cli.common import (
    Register,
    console,
    database_url,
    err_console,
    served_application,
)


def db_setup(ctx: typer.Context) -> None:
    """Create or migrate writegate's own tables: its ledger, LangGraph's checkpoints and
    the HTTP service's, each in writegate's schema (safe to re-run); on the demo's
    database, the demo's tables too. The database DATABASE_URL names is created first
    when it does not exist and your role may create databases."""
    from writegate.checkpoints.schema import setup_database
    from writegate.surfaces.store import setup_service

    application = served_application(ctx)
    url = database_url(create=True)
    with console.status(f"Setting up {describe_database(url)} ..."):
        setup_database(url)
        if application is not None and application.owns(url):
            application.setup(url)
        setup_service(url)
    console.print(f"[green]ok[/green] tables ready on {describe_database(url)}")


def db_status(ctx: typer.Context) -> None:
    """Show each migration list's applied versions and the writegate release that last
    migrated it, beside this code's (changes nothing)."""
    import psycopg

    from writegate.checkpoints.migrate import RELEASE, migration_status
    from writegate.checkpoints.schema import CORE
    from writegate.surfaces.store.schema import SERVICE

    application = served_application(ctx)
    lists = (CORE, SERVICE, *([application.migrations] if application is not None else []))
    url = database_url()
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            states = [migration_status(conn, listed) for listed in lists]
    except psycopg.OperationalError as exc:
        err_console.print(f"[red]error:[/red] {describe_database(url)}: {exc}".strip())
        raise typer.Exit(1) from None
    console.print(f"database   {describe_database(url)}")
    console.print(f"this code  writegate {RELEASE}")
    for state in states:
        by = (
            f"last migrated by writegate {state.release} at {state.migrated_at:%Y-%m-%d %H:%M %Z}"
            if state.release
            else "release not recorded"
        )
        console.print(f"{state.name:<10} migrations {state.applied} of {state.known}; {by}; "
                      f"{_advice(state.applied, state.known)}", soft_wrap=True)  # fmt: skip


def _advice(applied: int, known: int) -> str:
    if applied > known:
        return "the database is newer than this code: run the release that migrated it"
    if applied < known:
        return f"{known - applied} to apply: run writegate db setup"
    return "up to date"


def register(app: typer.Typer, more: Iterable[Register] = ()) -> None:
    """`writegate db` with `setup` and `status`, then the commands `more` adds."""
    group = typer.Typer(help="Create and fill the database.", no_args_is_help=True)
    group.command("setup")(db_setup)
    group.command("status")(db_status)
    for add in more:
        add(group)
    app.add_typer(group, name="db")
