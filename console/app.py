"""The `writegate` app composed: which commands, in which order, serving which application.

The surfaces' commands act on any database; on the demo's own database they serve the
demo's tools (`DemoApplication`, handed to them here). The demo's own commands
(`writegate.demo.cli`) sit among them where `writegate --help` lists them, each handed
the command line they join (`CommandLine`: its consoles, database and rendering).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial

import typer

from writegate.demo.cli import chat, demo, provider
from writegate.demo.cli import db as demo_db
from writegate.demo.cli.kit import CommandLine
from writegate.demo.served import DemoApplication
from writegate.surfaces.cli import (
    admin,
    answers,
    common,
    db,
    mcp,
    ops,
    render,
    serve,
    terminal,
    threads,
    webhooks,
)
from writegate.surfaces.cli.app import Register, build_app

COMMAND_LINE = CommandLine(
    console=common.console,
    err_console=common.err_console,
    database_url=common.database_url,
    reported_errors=render.reported_errors,
    markup_safe=terminal.markup_safe,
    preview_table=render.preview_table,
    proposal_table=render.proposal_table,
    error_panel=render.error_panel,
    receipt_panel=render.receipt_panel,
    audit_table=render.audit_table,
    print_messages=render.print_messages,
    read_line=answers.read_line,
    answer_all=answers.answer_all,
    left=answers.LeftThePrompt,
)


def _db(app: typer.Typer) -> None:
    db.register(app, more=[partial(demo_db.register, cli=COMMAND_LINE)])


def command(extra: Iterable[Register] = ()) -> typer.Typer:
    """The whole `writegate` app (a fresh one each call), with `extra` commands last."""
    commands: tuple[Register, ...] = (
        _db,
        partial(demo.register, cli=COMMAND_LINE),
        partial(chat.register, cli=COMMAND_LINE),
        threads.register,
        mcp.register,
        ops.register,
        partial(provider.register, cli=COMMAND_LINE),
        serve.register,
        admin.register,
        webhooks.register,
        *extra,
    )
    return build_app(commands, application=DemoApplication())
