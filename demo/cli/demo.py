"""`writegate demo`: one refund end to end, then the replays that must fail.

The command only; the walkthrough (`demo_run.py`), the agent and LangGraph load when it
runs, so `writegate --help` stays light.
"""

from __future__ import annotations

import typer

from writegate.demo.cli.kit import CommandLine


def register(app: typer.Typer, cli: CommandLine) -> None:
    def demo() -> None:
        """The demo's refund walkthrough: propose, preview, confirm, receipt, replays refused."""
        from writegate.demo.cli.demo_run import run_demo

        run_demo(cli)

    app.command("demo")(demo)
