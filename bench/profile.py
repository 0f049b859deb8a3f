"""Part 7: where the Python CPU goes, by package (cProfile, aggregated by file path).

A run of write operations on each graph under cProfile with a per-thread CPU clock,
so waiting on the database costs nothing; each function's own time is summed by the
package its file belongs to. The graphs run with durability="sync" so the checkpoint
writes happen on the profiled thread too; `coverage` says what share of the process
CPU the profile saw (LangGraph may still run a node on a worker thread).
"""

from __future__ import annotations

import cProfile
import pstats
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from writegate.bench import langchain_hitl
from writegate.bench.db import Orders
from writegate.bench.workload import GraphRunner, Kind
from writegate.demo.runtime import open_demo

WRITEGATE_ROOT = str(Path(__file__).resolve().parent.parent)
# Checked in order: psycopg_pool before psycopg, langchain_core before langchain.
PACKAGES = (
    "langgraph",
    "langchain_core",
    "langchain",
    "psycopg_pool",
    "psycopg",
    "pydantic_core",
    "pydantic",
)
TOP_FUNCTIONS = 25


def package_of(filename: str) -> str:
    """The package a profiled function belongs to, from its file path."""
    if filename.startswith("~") or filename.startswith("<"):
        return "builtins"  # C functions and methods: len, dict.get, socket calls ...
    for name in PACKAGES:
        if f"/{name}/" in filename:
            return name
    if "/writegate/" in filename or filename.startswith(WRITEGATE_ROOT):
        return "writegate"
    if "site-packages" in filename:
        return "other packages"
    return "python stdlib"


def _profile(runner: GraphRunner, ops: int) -> dict[str, Any]:
    profiler = cProfile.Profile(time.thread_time)
    cpu = time.process_time()
    profiler.enable()
    for i in range(ops):
        runner.op(f"prof-{runner.kind}-{i}", durability="sync")
    profiler.disable()
    process_ms = (time.process_time() - cpu) * 1000 / ops
    stats = pstats.Stats(profiler)
    by_package: defaultdict[str, float] = defaultdict(float)
    functions = []
    for (filename, line, name), (_, ncalls, own, _cum, _) in stats.stats.items():  # type: ignore[attr-defined]
        by_package[package_of(filename)] += own
        functions.append((own, ncalls, f"{Path(filename).name}:{line}({name})"))
    seen_ms = sum(by_package.values()) * 1000 / ops
    functions.sort(reverse=True)
    return {
        "operations": ops,
        "cpu_ms_per_op_by_package": {
            k: round(v * 1000 / ops, 3) for k, v in sorted(by_package.items(), key=lambda x: -x[1])
        },
        "profiled_cpu_ms_per_op": round(seen_ms, 3),
        "process_cpu_ms_per_op": round(process_ms, 3),
        "coverage": round(seen_ms / process_ms, 2) if process_ms else None,
        "function_calls_per_op": round(sum(s[1] for s in stats.stats.values()) / ops),  # type: ignore[attr-defined]
        "top_functions": [
            {
                "function": where,
                "own_ms_per_op": round(own * 1000 / ops, 3),
                "calls_per_op": round(n / ops, 1),
            }
            for own, n, where in functions[:TOP_FUNCTIONS]
        ],
    }


def run_profile(url: str, ops: int, advance: Callable[[], None]) -> dict[str, Any]:
    kinds: tuple[Kind, ...] = ("baseline", "writegate")
    if langchain_hitl.available():
        kinds = (*kinds, "langchain_hitl", "writegate_middleware")
    out: dict[str, Any] = {"method": __doc__.split("\n\n")[1].replace("\n", " ") if __doc__ else ""}
    with open_demo(url, setup=False).runtime as runtime:
        orders = Orders(runtime.pool, "prof")
        orders.reserve(len(kinds) * (ops + 3))
        for kind in kinds:
            runner = GraphRunner(kind, runtime, orders)
            for i in range(3):  # warm: first compiles, imports, prepared statements
                runner.op(f"prof-warm-{kind}-{i}", durability="sync")
            out[kind] = _profile(runner, ops)
            advance()
    return out
