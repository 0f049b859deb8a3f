"""The `writegate` app composed: which commands, in which order, serving which application.

The surfaces' commands act on any database; on the demo's own database they serve the
demo's tools (`DemoApplication`, handed to them here). The demo's commands sit among
them where `writegate --help` lists them.
"""

from __future__ import annotations

from collections.abc import Iterable

import typer

from writegate.console import chat, demo, demo_db, provider
from writegate.demo.served import DemoApplication
from writegate.surfaces.cli import admin, db, mcp, ops, serve, threads, webhooks
from writegate.surfaces.cli.app import Register, build_app


def _db(app: typer.Typer) -> None:
    db.register(app, more=[demo_db.register])


def command(extra: Iterable[Register] = ()) -> typer.Typer:
    """The whole `writegate` app (a fresh one each call), with `extra` commands last."""
    commands = (
        _db,
        demo.register,
        chat.register,
        threads.register,
        mcp.register,
        ops.register,
        provider.register,
        serve.register,
        admin.register,
        webhooks.register,
        *extra,
    )
    return build_app(commands, application=DemoApplication())
