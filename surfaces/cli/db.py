"""`writegate db`: create the schema and load the demo data."""

from __future__ import annotations

import typer

from writegate.checkpoints.database import describe_database
from writegate.surfaces.cli.common import console, database_url

db_app = typer.Typer(help="Create and fill the database.", no_args_is_help=True)


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


def register(app: typer.Typer) -> None:
    app.add_typer(db_app, name="db")
