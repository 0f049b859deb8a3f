"""`writegate serve` (the HTTP service and approval page) and `writegate keys create`.

Any number of `serve` processes may run against one database: they share nothing
but PostgreSQL. A key is printed once, when it is made; only its hash is stored.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated

import typer

from writegate.surfaces.cli.common import console, database_url, err_console

keys_app = typer.Typer(help="Manage API keys for the HTTP service.", no_args_is_help=True)


def serve(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.", min=0, max=65535)] = 8000,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
) -> None:
    """Serve the HTTP API and the approval page (open http://HOST:PORT/ in a browser).

    Reads DATABASE_URL, and WRITEGATE_PROPOSAL_TTL_SECONDS for how long a proposal
    may wait for a decision (default 15 minutes).
    """
    import uvicorn

    from writegate.surfaces.web import Settings, create_app
    from writegate.surfaces.web.services import SettingsError
    from writegate.graph.model import describe_model

    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        err_console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc
    # The same resolution as every other command (DATABASE_URL, local server, embedded).
    settings = replace(settings, database_url=database_url())
    console.print(f"writegate serving on http://{host}:{port}/ with the {describe_model()}")
    uvicorn.run(create_app(settings=settings), host=host, port=port, log_level=log_level)


@keys_app.command("create")
def keys_create(
    user: Annotated[str, typer.Option(help="The user the key acts as.")],
    tenant: Annotated[str, typer.Option(help="The user's tenant.")],
    role: Annotated[
        list[str] | None, typer.Option(help="A role to grant (repeatable), e.g. approver.")
    ] = None,
) -> None:
    """Create an API key for USER in TENANT and print it once (only its hash is kept)."""
    from writegate.checkpoints.keys import create_key
    from writegate.checkpoints.migrate import setup_database
    from writegate.checkpoints.pool import open_pool

    url = database_url()
    setup_database(url)
    pool = open_pool(url, max_size=1)
    try:
        with pool.connection() as conn:
            made = create_key(conn, user, tenant, role or [])
    finally:
        pool.close()
    roles = ", ".join(sorted(made.identity.roles)) or "none"
    err_console.print(
        f"key {made.key_id} for {user} in {tenant} (roles: {roles}); "
        "it is shown only now, store it safely:"
    )
    print(made.secret)


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
    app.add_typer(keys_app, name="keys")
