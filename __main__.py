"""The `writegate` command (also `python -m writegate`): the surfaces' commands plus
`writegate bench`, which sits above them."""

from __future__ import annotations

import typer

from writegate.bench.cli import register as register_bench
from writegate.surfaces.cli.app import build_app, run


def command() -> typer.Typer:
    """The whole `writegate` app."""
    return build_app(extra=[register_bench])


def main() -> None:
    run(command())


if __name__ == "__main__":
    main()
