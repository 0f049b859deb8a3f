"""Rich tables for parts 1-3, each figure next to its target; the whole report; the JSON file.

Parts 1c and 4-6 have their tables in `bench.report_more`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from writegate.bench.report_more import (
    http_storm_table,
    middleware_table,
    scale_table,
    storage_tables,
    storm_table,
)
from writegate.bench.targets import targets_table

JSON_NAME = "bench-results.json"


def write_json(results: dict[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / JSON_NAME
    path.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def _ok(flag: bool) -> str:
    return "[green]met[/green]" if flag else "[red]missed[/red]"


def compare_tables(r: dict[str, Any]) -> list[Table]:
    c = r["compare"]
    t = Table(
        title=f"1. Baseline vs writegate, per write operation ({c['operations_each']} each, "
        f"interleaved, durability={c['durability']})"
    )
    for col in ("graph", "median ms", "p95 ms", "p99 ms", "mean ms", "CPU ms (median)"):
        t.add_column(col, justify="right" if col != "graph" else "left")
    for kind in ("baseline", "writegate", "langchain_hitl"):
        if kind not in c:
            continue
        s = c[kind]
        t.add_row(
            kind,
            f"{s['median_ms']:.2f}",
            f"{s['p95_ms']:.2f}",
            f"{s['p99_ms']:.2f}",
            f"{s['mean_ms']:.2f}",
            f"{c['process_cpu'][kind]['median_ms']:.2f}",
        )
    ratio = c["ratio"]
    low, high = ratio["bootstrap_ci95"]
    q1, q3 = ratio["per_pair_iqr"]
    t.caption = (
        f"writegate/baseline: {ratio['ratio_of_medians']:.3f} (95% bootstrap CI {low:.3f}-"
        f"{high:.3f}); per pair median {ratio['per_pair_median']:.3f} IQR {q1:.3f}-{q3:.3f}. "
        f"Target <= {c['target_ratio']} (aim {c['aim_ratio']}): {_ok(c['meets_target'])}"
    )
    if "vs_langchain_hitl" in c:
        peer = c["vs_langchain_hitl"]
        t.caption += (
            "\nlangchain_hitl: create_agent + HumanInTheLoopMiddleware, same model, tool and "
            "saver. langchain_hitl/baseline "
            f"{peer['langchain_hitl_over_baseline']['ratio_of_medians']:.3f}; writegate/"
            f"langchain_hitl {peer['writegate_agent_over_langchain_hitl']['ratio_of_medians']:.3f}"
        )
    a = r["attribution"]
    t2 = Table(
        title=f"1b. Where the time goes (means per operation, {a['operations_each_per_mode']}"
        " each per durability mode)"
    )
    cols = (
        "durability",
        "graph",
        "mean ms",
        "CPU ms",
        "checkpointer ms",
        "ledger+domain ms",
        "provider ms",
        "checkpoints (subgraph)",
        "write batches",
        "ckpt reads",
    )
    for col in cols:
        t2.add_column(col, justify="left" if col in ("durability", "graph") else "right")
    for mode, m in a["modes"].items():
        for kind in ("baseline", "writegate"):
            x = m[kind]
            t2.add_row(
                mode,
                kind,
                f"{x['total_ms']:.2f}",
                f"{x['process_cpu_ms']:.2f}",
                f"{x['checkpointer_ms']:.2f}",
                f"{x['ledger_and_domain_ms']:.2f}",
                f"{x['provider_ms']:.2f}",
                f"{x['checkpoints_saved']:.1f} ({x.get('subgraph_checkpoints', 0):.1f})",
                f"{x['writes_saved']:.1f}",
                f"{x['checkpoint_reads']:.1f}",
            )
    t2.caption = "\n".join(a["explanation"])
    return [t, t2]


def ledger_table(r: dict[str, Any]) -> Table:
    led = r["ledger"]
    t = Table(
        title="2. Ledger alone (propose, confirm, execute incl. provider call, receipt) "
        f"vs single-row durable commits (synchronous_commit={led['synchronous_commit']})"
    )
    for col in (
        "threads",
        "ops/s",
        "median ms",
        "p95 ms",
        "commits/s",
        "commit median ms",
        "op = N commits",
    ):
        t.add_column(col, justify="right")
    for op, cm in zip(led["ledger"], led["single_row_commits"], strict=True):
        t.add_row(
            str(op["concurrency"]),
            f"{op['ops_per_s']:.0f}",
            f"{op['median_ms']:.2f}",
            f"{op['p95_ms']:.2f}",
            f"{cm['commits_per_s']:.0f}",
            f"{cm['median_ms']:.3f}",
            f"{op['commits_worth']:.1f}",
        )
    return t


def counts_table(r: dict[str, Any]) -> Table:
    c = r["counts"]
    t = Table(title="3. Statements and transactions per write operation (counted)")
    for col in (
        "path",
        "statements",
        "durable commits",
        "ledger commits",
        "checkpointer commits",
        "pool checks",
        "server = driver",
    ):
        t.add_column(col, justify="left" if col == "path" else "right")
    for path, p in c["paths"].items():
        checks = p["per_operation"]["statements"].get("pool_check", 0)
        agree = (
            f"{p['server_xact_commit_delta']} = {p['driver_transactions_plus_connections']}"
            if p["server_and_driver_agree"]
            else f"[red]{p['server_xact_commit_delta']} vs "
            f"{p['driver_transactions_plus_connections']}[/red]"
        )
        t.add_row(
            path,
            f"{p['statements_per_op']:.1f}",
            f"{p['durable_commits_per_op']:.1f}",
            f"{p['ledger_commits_per_op']:.1f}",
            f"{p['checkpointer_commits_per_op']:.1f}",
            f"{checks:.1f}",
            agree,
        )
    t.caption = (
        f"Ledger commits per write: {c['ledger_commits_per_write']:.1f}, target <= "
        f"{c['target_ledger_commits']}: {_ok(c['meets_target'])}. {c['method']}. A difference "
        "of 1-2 comes from psycopg's 100-statement prepared cache evicting (see bench/counts.py)."
    )
    return t


def profile_table(r: dict[str, Any]) -> Table:
    p = r["profile"]
    kinds = [
        k for k in ("baseline", "writegate", "langchain_hitl", "writegate_middleware") if k in p
    ]
    t = Table(title="7. Python CPU per write by package (cProfile, own time, ms per operation)")
    t.add_column("package")
    for kind in kinds:
        t.add_column(kind, justify="right")
    packages = dict.fromkeys(k for kind in kinds for k in p[kind]["cpu_ms_per_op_by_package"])
    for package in packages:
        t.add_row(
            package,
            *(f"{p[kind]['cpu_ms_per_op_by_package'].get(package, 0.0):.2f}" for kind in kinds),
        )
    t.add_row("profiled total", *(f"{p[kind]['profiled_cpu_ms_per_op']:.2f}" for kind in kinds))
    t.add_row("process CPU", *(f"{p[kind]['process_cpu_ms_per_op']:.2f}" for kind in kinds))
    t.caption = p["method"]
    return t


def print_report(results: dict[str, Any], console: Console) -> None:

    tables = [
        *compare_tables(results),
        middleware_table(results),
        ledger_table(results),
        counts_table(results),
        storm_table(results),
        http_storm_table(results),
        *storage_tables(results),
        scale_table(results),
        profile_table(results),
        targets_table(results["targets"]),
    ]
    for table in tables:
        table.caption_justify = "left"
        console.print(table)
        console.print()
    tracing = results.get("tracing")
    if tracing:
        median = results.get("compare", {}).get("writegate", {}).get("median_ms")
        share = (
            f" ({tracing['off_us_per_life'] / 10 / median:.3f}% of a median write)"
            if median
            else ""
        )
        console.print(
            f"[bold]Tracing off[/bold] (no exporter): {tracing['off_us_per_life']} µs per "
            f"proposal life{share}; with an SDK provider and no exporter: "
            f"{tracing.get('sdk_no_exporter_us_per_life', 'n/a')} µs"
        )
        console.print()
    console.print("[bold]What the safety costs[/bold]")
    for line in results["cost"]["lines"]:
        console.print(f"  {line}")
