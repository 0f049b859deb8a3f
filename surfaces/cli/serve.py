"""`writegate serve` (the HTTP service and approval page) and `writegate keys ...`.

Any number of `serve` processes may run against one database: they share nothing
but PostgreSQL. A key is printed once, when it is made; only its hash is stored, so
`keys list` shows ids, owners and dates, never a secret. `keys revoke` revokes by id;
the HTTP service and the MCP server refuse the key from the next request on.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, replace
from typing import Annotated, Any

import typer

from writegate.surfaces.cli.common import console, database_url, err_console, served_application
from writegate.surfaces.cli.extras import needs_extra
from writegate.surfaces.cli.terminal import clean, markup_safe

keys_app = typer.Typer(
    help="Manage API keys for the HTTP service and the MCP server.", no_args_is_help=True
)


def serve(
    ctx: typer.Context,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.", min=0, max=65535)] = 8000,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
) -> None:
    """Serve the HTTP API and the approval page (open http://HOST:PORT/ in a browser).

    Reads DATABASE_URL, and WRITEGATE_PROPOSAL_TTL_SECONDS for how long a proposal
    may wait for a decision (default 15 minutes).
    """
    from writegate.surfaces.served import describe_served_model

    with needs_extra("serve", "server"):
        import uvicorn

        from writegate.surfaces.web import Settings, create_app
        from writegate.surfaces.web.services import SettingsError

    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        err_console.print(f"[red]error:[/red] {markup_safe(exc)}")
        raise typer.Exit(2) from exc
    # Load the policy now, so a broken file stops here with one line (PolicyError,
    # reported by the command's entry point), not later inside the server's startup.
    settings.policy()
    # The same resolution as every other command (DATABASE_URL, local server, embedded).
    url = database_url()
    settings = replace(settings, database_url=url)
    application = served_application(ctx)
    model = describe_served_model(url, application)
    console.print(f"writegate serving on http://{host}:{port}/ with the {model}")
    app = create_app(settings=settings, application=application)
    uvicorn.run(app, host=host, port=port, log_level=log_level)


@keys_app.command("create")
def keys_create(
    user: Annotated[str, typer.Option(help="The user the key acts as.")],
    tenant: Annotated[str, typer.Option(help="The user's tenant.")],
    role: Annotated[
        list[str] | None, typer.Option(help="A role to grant (repeatable), e.g. approver.")
    ] = None,
) -> None:
    """Create an API key for USER in TENANT and print it once (only its hash is kept)."""
    from writegate.surfaces.store.keys import create_key

    with _keys_connection() as conn:
        made = create_key(conn, user, tenant, role or [])
    roles = ", ".join(sorted(made.identity.roles)) or "none"
    err_console.print(
        f"key {made.key_id} for {user} in {tenant} (roles: {roles}); "
        "it is shown only now, store it safely:"
    )
    print(made.secret)


@keys_app.command("revoke")
def keys_revoke(
    key_id: Annotated[str, typer.Argument(help="The key's id (key_...), as `keys list` shows.")],
) -> None:
    """Revoke an API key: from the next request on, the HTTP service and the MCP server
    refuse it, in every process."""
    from writegate.surfaces.cli.render import reported_errors
    from writegate.surfaces.store.keys import revoke_key_by_id

    with reported_errors(err_console), _keys_connection() as conn:
        info, revoked = revoke_key_by_id(conn, key_id)
    owner = f"{info.user_id} in {info.tenant_id}"
    if revoked:
        done = f"key {info.key_id} ({owner}) is revoked: the HTTP service and the MCP server"
        console.print(clean(f"{done} refuse it from the next request on"), markup=False)
    else:
        when = info.revoked_at.isoformat() if info.revoked_at else "?"
        console.print(clean(f"key {info.key_id} ({owner}) was already revoked at {when}"),
                      markup=False)  # fmt: skip


@keys_app.command("list")
def keys_list(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's keys.")] = None,
    active: Annotated[bool, typer.Option("--active", help="Only keys not revoked.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000, help="At most this many.")] = (
        1000
    ),
    cursor: Annotated[
        str | None, typer.Option("--cursor", help="The next page, as the last one printed it.")
    ] = None,
    order: Annotated[str, typer.Option("--order", help="oldest (the default) or newest first.")] = (
        "oldest"
    ),
) -> None:
    """List API keys, oldest first: id, user, tenant, roles, created, revoked, a page at
    a time; the line after a page says how to ask for the next. Never a secret: only a
    hash of each is kept."""
    from writegate.approval.views import PageArgs
    from writegate.surfaces.cli.render import reported_errors
    from writegate.surfaces.store.keys import list_keys

    args = PageArgs(limit=limit, cursor=cursor, order=order)  # type: ignore[arg-type]  # checked
    with reported_errors(err_console), _keys_connection() as conn:
        found = list_keys(conn, tenant_id=tenant, active_only=active, args=args)
    if found.next_cursor is not None:  # on standard error: standard output stays the list
        err_console.print(f"next page: --cursor {found.next_cursor}", soft_wrap=True)
    if as_json:
        print(json.dumps([asdict(key) for key in found], default=str, indent=2))
        return
    print("key_id  user  tenant  roles  created  status")
    for key in found:
        roles = ",".join(key.roles) or "-"
        created = key.created_at.isoformat(timespec="seconds")
        status = (
            f"revoked {key.revoked_at.isoformat(timespec='seconds')}"
            if key.revoked_at
            else "active"
        )
        print(clean(f"{key.key_id}  {key.user_id}  {key.tenant_id}  {roles}  {created}  {status}"))


@contextmanager
def _keys_connection() -> Iterator[Any]:
    """One connection to the (set up) database, for a key command."""
    from writegate.checkpoints.pool import open_pool
    from writegate.checkpoints.schema import setup_database
    from writegate.surfaces.store import setup_service

    url = database_url()
    setup_database(url)
    setup_service(url)
    pool = open_pool(url, max_size=1)
    try:
        with pool.connection() as conn:
            yield conn
    finally:
        pool.close()


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
    app.add_typer(keys_app, name="keys")
