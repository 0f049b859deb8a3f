"""`writegate provider serve`: the demo's payment provider simulator over HTTP."""

from __future__ import annotations

from typing import Annotated

import typer

from writegate.demo.cli.kit import CommandLine


def register(app: typer.Typer, cli: CommandLine) -> None:
    def provider_serve(
        port: Annotated[int, typer.Option("--port", min=0, help="0 picks a free port.")] = 8700,
        host: Annotated[str, typer.Option("--host")] = "127.0.0.1",
        faults: Annotated[
            list[str] | None,
            typer.Option("--faults", help="Fault rule, e.g. 'timeout_after' or 'ord_1=503*2,ok'."),
        ] = None,
        stall: Annotated[
            float, typer.Option("--stall", min=0.0, help="Seconds a timeout fault holds a call.")
        ] = 5.0,
    ) -> None:
        """Run the payment provider simulator over HTTP (refund, lookup by key, faults)."""
        from writegate.demo.provider_http import serve

        def ready(url: str) -> None:
            print(f"listening on {url}", flush=True)

        try:
            url = cli.database_url()
            serve(url, host=host, port=port, rules=faults, stall_seconds=stall, ready=ready)
        except ValueError as exc:  # a malformed fault rule
            cli.err_console.print(f"[red]error:[/red] {cli.markup_safe(exc)}")
            raise typer.Exit(2) from exc
        except KeyboardInterrupt:
            pass

    provider_app = typer.Typer(help="The demo's payment provider simulator.", no_args_is_help=True)
    provider_app.command("serve")(provider_serve)
    app.add_typer(provider_app, name="provider")
