"""`writegate chat`: a terminal conversation on a durable thread.

The command and its options only; the conversation (`chat_loop.py`), the agent, its
model and LangGraph load when the command runs, so `writegate --help` stays light.
"""

from __future__ import annotations

from typing import Annotated

import typer

from writegate.demo.cli.kit import CommandLine


def register(app: typer.Typer, cli: CommandLine) -> None:
    def chat(
        thread: Annotated[
            str | None, typer.Option("--thread", help="Thread id to resume; new if omitted.")
        ] = None,
        user: Annotated[str, typer.Option("--user", help="Who you are (the run's user_id).")] = (
            "user_42"
        ),
        tenant: Annotated[str, typer.Option("--tenant", help="Your tenant (tenant_id).")] = (
            "tenant_hz"
        ),
    ) -> None:
        """The demo's agent, in a chat on a durable thread; approvals get an explicit prompt."""
        from writegate.demo.cli.chat_loop import run_chat

        run_chat(cli, thread, user, tenant)

    app.command("chat")(chat)
