"""`writegate bench`: measure what writegate's safety costs next to a naive LangGraph approval.

Creates its own databases on the server (DATABASE_URL, else the local one), runs the
parts of `bench/`, prints a table per part, and writes `bench-results.json` and
`bench-latency.png` to `--out`. Targets are printed beside the figures; a missed target
never makes the command fail.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from writegate.surfaces.cli.common import console, database_url

DEFAULT_OUT = Path(".writegate") / "bench"


def bench(
    ops: Annotated[
        int | None,
        typer.Option("--ops", min=2, help="Write operations per graph in part 1 (default 300)."),
    ] = None,
    quick: Annotated[
        bool, typer.Option("--quick", help="A tiny run (well under 30 s) to check it works.")
    ] = False,
    out: Annotated[
        Path, typer.Option("--out", help="Folder for bench-results.json and bench-latency.png.")
    ] = DEFAULT_OUT,
    writes: Annotated[
        int | None,
        typer.Option(
            "--writes",
            min=3,
            help="Only the service's cost: this many approved writes over HTTP, through the "
            "service without HTTP, and in-process, interleaved (about 0.3 s each).",
        ),
    ] = None,
    keep: Annotated[
        bool, typer.Option("--keep", help="Keep the bench databases instead of dropping them.")
    ] = False,
) -> None:
    """Benchmark writegate against a plain interrupt + ToolNode graph on the same database."""
    if writes is not None:
        _service_cost(writes, keep)
        return
    from writegate.bench.report import print_report, write_json
    from writegate.bench.run import Options, run_bench

    options = Options.quick(ops or 10) if quick else Options.full(ops or 300)
    results = run_bench(database_url(), options, keep=keep, console=console)
    print_report(results, console)
    console.print(f"figures: {write_json(results, out)}")
    try:
        from writegate.bench.chart import write_chart
    except ImportError:
        console.print("chart:   skipped (matplotlib missing: uv sync --group bench)")
    else:
        console.print(f"chart:   {write_chart(results, out)}")
    console.print(f"took {results['seconds']} s on a machine with load {_load(results)}")
    if results["databases_kept"]:
        console.print(f"kept databases: {', '.join(results['databases_kept'])}")


def _service_cost(writes: int, keep: bool) -> None:
    from writegate.bench.db import BenchServer
    from writegate.bench.service_cost import print_service_cost, run_service_cost

    server = BenchServer(database_url(), keep=keep)
    try:
        out = run_service_cost(server, writes)
    finally:
        server.drop_all()
    print_service_cost(out, console)


def _load(results: dict[str, object]) -> str:
    machine = results.get("machine")
    load = machine.get("load_average_at_start") if isinstance(machine, dict) else None
    return " / ".join(str(x) for x in load) if load else "unknown"


def register(app: typer.Typer) -> None:
    app.command("bench")(bench)
