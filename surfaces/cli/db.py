"""`writegate db`: create the schema, say where it stands, load the demo data, put it
back as seeded."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

from writegate.checkpoints.database import describe_database
from writegate.surfaces.cli.common import console, database_url, err_console

SEEDED = (
    "demo data: tenant_hz; user_42 owns ord_1001 (¥199.00) and tickets; "
    "user_7 owns ord_2002 (¥50.00)"
)

db_app = typer.Typer(help="Create and fill the database.", no_args_is_help=True)


@db_app.command("setup")
def db_setup() -> None:
    """Create or migrate writegate's own tables: its ledger, LangGraph's checkpoints and
    the HTTP service's, each in writegate's schema (safe to re-run); on the demo's
    database, the demo's tables too. The database DATABASE_URL names is created first
    when it does not exist and your role may create databases."""
    from writegate.checkpoints.schema import setup_database
    from writegate.demo.runtime import setup_demo
    from writegate.surfaces.served import is_demo_database
    from writegate.surfaces.store import setup_service

    url = database_url(create=True)
    with console.status(f"Setting up {describe_database(url)} ..."):
        setup_database(url)
        if is_demo_database(url):
            setup_demo(url)
        setup_service(url)
    console.print(f"[green]ok[/green] tables ready on {describe_database(url)}")


@db_app.command("status")
def db_status() -> None:
    """Show each migration list's applied versions and the writegate release that last
    migrated it, beside this code's (changes nothing)."""
    import psycopg

    from writegate.checkpoints.migrate import RELEASE, migration_status
    from writegate.checkpoints.schema import CORE
    from writegate.demo.schema import DEMO
    from writegate.surfaces.store.schema import SERVICE

    url = database_url()
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            states = [migration_status(conn, listed) for listed in (CORE, SERVICE, DEMO)]
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


@db_app.command("seed")
def db_seed() -> None:
    """The demo's data: its tables, tenant, users, orders and tickets (idempotent)."""
    from writegate.demo.seed import seed_demo

    _with_connection(seed_demo)
    console.print(f"[green]ok[/green] {SEEDED}")


@db_app.command("reset")
def db_reset(
    yes: Annotated[
        bool, typer.Option("--yes", help="Reset even when the database holds other data.")
    ] = False,
) -> None:
    """The demo's data put back as seeded (ord_1001 refundable again), and
    cancel its approvals no thread asks any more (see `writegate orphans`).

    Only demo rows change. Without --yes it refuses when the database holds more than
    demo data: another tenant's orders, tickets or proposals, or demo-tenant orders and
    tickets that are not the seeded or demo-created ones.
    """
    from writegate.demo.seed import foreign_rows, reset_demo, seed_demo

    def reset(conn: Any) -> None:
        others = foreign_rows(conn)
        if others and not yes:
            err_console.print(
                f"[red]error:[/red] this database holds {others} row(s) that are not demo "
                "data; nothing was changed. Re-run with --yes to reset the demo rows anyway.",
                soft_wrap=True,
            )
            raise typer.Exit(2)
        reset_demo(conn)
        seed_demo(conn)

    _with_connection(reset)
    console.print(f"[green]ok[/green] reset to the seeded {SEEDED}")
    ended = _end_orphans()
    if ended:
        console.print(f"[green]ok[/green] cancelled {ended} approval(s) no thread asks any more")


def _end_orphans() -> int:
    """The demo tenant's approvals whose thread here no longer asks them (see
    `writegate orphans`): cancelled, audited as the reset's."""
    from datetime import timedelta

    from writegate import Writegate
    from writegate.demo.seed import DEMO_TENANT

    with Writegate.open(database_url(), tools=[]) as wg:
        return len(wg.end_orphaned("operator:db-reset", timedelta(0), DEMO_TENANT))


def _with_connection(work: Callable[[Any], None]) -> None:
    """Set the demo's tables up, then run `work` in one transaction on one connection."""
    from writegate.checkpoints.pool import open_pool
    from writegate.demo.runtime import setup_demo

    url = database_url()
    setup_demo(url)
    pool = open_pool(url, max_size=1)
    try:
        with pool.connection() as conn, conn.transaction():
            work(conn)
    finally:
        pool.close()


def register(app: typer.Typer) -> None:
    app.add_typer(db_app, name="db")
