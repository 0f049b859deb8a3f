"""The `writegate` command (also `python -m writegate`): the app `writegate.console`
composes (the surfaces' commands and the demo's) plus `writegate bench`, which sits
above them.

The benchmark is not part of the library: it lives in the repository's `bench/` and
never ships in the wheel. In a checkout (`uv sync` links it in) `writegate bench` runs
it; an installed wheel has the command too, and it says where the benchmark is.
"""

from __future__ import annotations

import typer

from writegate.console.app import command as console_app
from writegate.surfaces.cli.app import Register, run
from writegate.surfaces.cli.common import err_console


def _bench_elsewhere(app: typer.Typer) -> None:
    @app.command(
        "bench", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
    )
    def bench() -> None:
        """Benchmark writegate (runs from a checkout of the repository only)."""
        err_console.print(
            "error: the benchmark is not installed with writegate: it runs from a checkout "
            "of the repository, with `uv sync` then `uv run writegate bench`"
        )
        raise typer.Exit(2)


def _bench() -> Register:
    try:
        from writegate.bench.cli import register
    except ModuleNotFoundError as exc:
        if exc.name != "writegate.bench":
            raise  # the bench is here, but something it needs is not
        return _bench_elsewhere
    return register


def command() -> typer.Typer:
    """The whole `writegate` app."""
    return console_app(extra=[_bench()])


def main() -> None:
    run(command())


if __name__ == "__main__":
    main()
