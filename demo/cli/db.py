"""The demo's `writegate db` commands: `db seed` loads its data, `db reset` puts it
back as seeded. They join `db setup` and `db status` in the `db` group."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

from writegate.demo.cli.kit import CommandLine

SEEDED = (
    "demo data: tenant_hz; user_42 owns ord_1001 (¥199.00) and tickets; "
    "user_7 owns ord_2002 (¥50.00)"
)


def register(group: typer.Typer, cli: CommandLine) -> None:
    def db_seed() -> None:
        """The demo's data: its tables, tenant, users, orders and tickets (idempotent)."""
        from writegate.demo.seed import seed_demo

        _with_connection(cli.database_url(), seed_demo)
        cli.console.print(f"[green]ok[/green] {SEEDED}")

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
                cli.err_console.print(
                    f"[red]error:[/red] this database holds {others} row(s) that are not demo "
                    "data; nothing was changed. Re-run with --yes to reset the demo rows anyway.",
                    soft_wrap=True,
                )
                raise typer.Exit(2)
            reset_demo(conn)
            seed_demo(conn)

        _with_connection(cli.database_url(), reset)
        cli.console.print(f"[green]ok[/green] reset to the seeded {SEEDED}")
        ended = _end_orphans(cli.database_url())
        if ended:
            cli.console.print(
                f"[green]ok[/green] cancelled {ended} approval(s) no thread asks any more"
            )

    group.command("seed")(db_seed)
    group.command("reset")(db_reset)


def _end_orphans(url: str) -> int:
    """The demo tenant's approvals whose thread here no longer asks them (see
    `writegate orphans`): cancelled, audited as the reset's."""
    from datetime import timedelta

    from writegate import Writegate
    from writegate.demo.seed import DEMO_TENANT

    with Writegate.open(url, tools=[]) as wg:
        return len(wg.end_orphaned("operator:db-reset", timedelta(0), DEMO_TENANT))


def _with_connection(url: str, work: Callable[[Any], None]) -> None:
    """Set the demo's tables up, then run `work` in one transaction on one connection."""
    from writegate import open_pool
    from writegate.demo.schema import setup_demo

    setup_demo(url)
    pool = open_pool(url, max_size=1)
    try:
        with pool.connection() as conn, conn.transaction():
            work(conn)
    finally:
        pool.close()
