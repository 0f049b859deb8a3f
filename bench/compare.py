"""Part 1: the naive LangGraph approval vs writegate, interleaved on one database.

The main run alternates the two graphs operation by operation (A B, B A, ...) so both
see the same machine, and reports medians, p95 and the writegate/baseline ratio with
its spread. The attribution run repeats a smaller interleaved sample on instrumented
runtimes under each LangGraph durability mode and splits each operation's time into
checkpointer calls, ledger calls, domain/provider work and the rest (the graph engine,
the scripted model and serialization).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, get_args

from writegate.bench import langchain_hitl
from writegate.bench.attribution import Recorder, breakdown, instrument_runtime, timed_saver
from writegate.bench.db import Orders
from writegate.bench.stats import ratio_spread, summary_ms
from writegate.bench.workload import Durability, GraphRunner, Kind
from writegate.checkpoints.pool import open_pool
from writegate.demo.runtime import default_provider, open_demo

WARMUP = 5
TARGET_RATIO = 1.20
AIM_RATIO = 1.10


def run_interleaved(
    url: str,
    kinds: tuple[Kind, ...],
    ops: int,
    advance: Callable[[], None],
    *,
    prefix: str,
    durability: Durability = "async",
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """`ops` writes through each graph, interleaved on one runtime, after a warm-up:
    wall seconds and process CPU seconds per write, per graph, paired by index."""
    with open_demo(url, setup=False).runtime as runtime:
        orders = Orders(runtime.pool, prefix)
        orders.reserve(len(kinds) * (ops + WARMUP))
        runners = {k: GraphRunner(k, runtime, orders) for k in kinds}
        for i in range(WARMUP):
            for runner in runners.values():
                runner.op(f"{prefix}-warm-{runner.kind}-{i}", durability=durability)
        samples: dict[str, list[float]] = {k: [] for k in kinds}
        cpu: dict[str, list[float]] = {k: [] for k in kinds}
        for i in range(ops):
            shift = i % len(kinds)  # each graph takes each place in the order in turn
            for kind in kinds[shift:] + kinds[:shift]:
                runner = runners[kind]
                samples[kind].append(runner.op(f"{prefix}-{kind}-{i}", durability=durability))
                cpu[kind].append(runner.last_cpu)
            advance()
    return samples, cpu


def interleaved_figures(
    samples: dict[str, list[float]], cpu: dict[str, list[float]], base: Kind, other: Kind
) -> dict[str, Any]:
    """Each graph's summary, and `other`/`base` against the target."""
    ratio = ratio_spread(samples[base], samples[other])
    return {
        "operations_each": len(samples[base]),
        **{kind: summary_ms(v) for kind, v in samples.items()},
        "ratio": ratio,
        "process_cpu": {kind: summary_ms(v) for kind, v in cpu.items()},
        "target_ratio": TARGET_RATIO,
        "aim_ratio": AIM_RATIO,
        "meets_target": bool(ratio["ratio_of_medians"] <= TARGET_RATIO),
        "samples_ms": {k: [round(s * 1000, 3) for s in v] for k, v in samples.items()},
    }


def run_compare(
    url: str, ops: int, advance: Callable[[], None], *, durability: Durability = "async"
) -> dict[str, Any]:
    kinds: tuple[Kind, ...] = ("baseline", "writegate")
    if langchain_hitl.available():
        kinds = (*kinds, "langchain_hitl")
    samples, cpu = run_interleaved(url, kinds, ops, advance, prefix="cmp", durability=durability)
    result = {
        "durability": durability,
        "order": "interleaved, rotating which graph goes first",
        **interleaved_figures(samples, cpu, "baseline", "writegate"),
    }
    if "langchain_hitl" in samples:
        # The real peer, against the whole writegate agent; the like-for-like figure,
        # wg.middleware() in the same create_agent, is part 1c (bench/middleware.py).
        result["vs_langchain_hitl"] = {
            "langchain_hitl_over_baseline": ratio_spread(
                samples["baseline"], samples["langchain_hitl"]
            ),
            "writegate_agent_over_langchain_hitl": ratio_spread(
                samples["langchain_hitl"], samples["writegate"]
            ),
        }
    return result


def _op_row(recorder: Recorder, runner: GraphRunner, total: float) -> dict[str, float]:
    seconds, counts = recorder.take()
    ms = {k: v * 1000 for k, v in seconds.items()}
    kind = runner.kind
    row = {
        "total_ms": total * 1000,
        "process_cpu_ms": runner.last_cpu * 1000,
        "checkpointer_ms": ms.get("ckpt_put", 0)
        + ms.get("ckpt_writes", 0)
        + ms.get("ckpt_read", 0),
        "provider_ms": ms.get("provider", 0),
        "checkpoints_saved": counts.get("ckpt_put", 0),
        "subgraph_checkpoints": counts.get("ckpt_put_subgraph", 0),
        "writes_saved": counts.get("ckpt_writes", 0),
        "checkpoint_reads": counts.get("ckpt_read", 0),
    }
    if kind == "writegate":  # execute() includes the provider call; T1 carries the domain write
        row["ledger_and_domain_ms"] = ms.get("ledger", 0) - ms.get("provider", 0)
        row["ledger_cpu_ms"] = ms.get("ledger_cpu", 0) - ms.get("provider_cpu", 0)
        row["ledger_calls"] = counts.get("ledger", 0)
    else:
        row["ledger_and_domain_ms"] = ms.get("domain", 0)
        row["ledger_cpu_ms"] = 0.0
        row["ledger_calls"] = 0
    return row


def run_attribution(url: str, ops: int, advance: Callable[[], None]) -> dict[str, Any]:
    """Per durability mode: mean per-operation components for both graphs, interleaved."""
    modes: dict[str, Any] = {}
    recorder = Recorder()
    pool = open_pool(url, max_size=10)  # as `open_demo` opens it: the provider shares it
    provider = default_provider(pool)  # timed: the one the runtime's tools call
    with open_demo(url, setup=False, provider=provider, pool=pool).runtime as runtime:
        instrument_runtime(runtime, provider, recorder)
        saver = timed_saver(runtime, recorder)
        orders = Orders(runtime.pool, "attr")
        orders.reserve(2 * len(get_args(Durability)) * (ops + 2))
        runners = {
            "baseline": GraphRunner(
                "baseline",
                runtime,
                orders,
                provider=provider,
                checkpointer=saver,
                on_domain=lambda s: recorder.add("domain", s),
            ),
            "writegate": GraphRunner("writegate", runtime, orders, checkpointer=saver),
        }
        for mode in get_args(Durability):
            rows: dict[str, list[dict[str, float]]] = {"baseline": [], "writegate": []}
            for i in range(ops + 2):
                order = ("baseline", "writegate") if i % 2 == 0 else ("writegate", "baseline")
                for kind in order:
                    recorder.take()
                    total = runners[kind].op(f"attr-{mode}-{kind}-{i}", durability=mode)
                    if i >= 2:  # the first two warm the mode up
                        rows[kind].append(_op_row(recorder, runners[kind], total))
                advance()
            modes[mode] = {kind: breakdown(r) for kind, r in rows.items()}
            for kind, r in rows.items():
                modes[mode][kind]["median_total_ms"] = summary_ms(
                    [x["total_ms"] / 1000 for x in r]
                )["median_ms"]
            modes[mode]["ratio_of_medians"] = round(
                modes[mode]["writegate"]["median_total_ms"]
                / modes[mode]["baseline"]["median_total_ms"],
                3,
            )
    return {"operations_each_per_mode": ops, "modes": modes, "explanation": explain(modes)}


def explain(modes: dict[str, Any]) -> list[str]:
    """Where writegate's extra time goes, in sentences built from the measured means."""
    lines = []
    if "sync" in modes:  # every checkpoint write on the critical path: the parts add up
        b, w = modes["sync"]["baseline"], modes["sync"]["writegate"]
        extra = w["total_ms"] - b["total_ms"]
        ledger = w["ledger_and_domain_ms"] - b["ledger_and_domain_ms"]
        ckpt = w["checkpointer_ms"] - b["checkpointer_ms"]
        rest = extra - ledger - ckpt - (w["provider_ms"] - b["provider_ms"])
        lines.append(
            f"durability=sync: writegate adds {extra:.1f} ms per operation (means): "
            f"{ledger:.1f} ms in {w['ledger_calls']:.0f} ledger calls (propose, the question's "
            f"record, confirm and execute; {w['ledger_cpu_ms']:.1f} ms of it CPU in this Python "
            "process), "
            f"{ckpt:.1f} ms in checkpointer calls "
            f"({w['checkpoints_saved']:.0f} vs {b['checkpoints_saved']:.0f} checkpoints, "
            f"{w['writes_saved']:.0f} vs {b['writes_saved']:.0f} write batches; "
            f"{w['subgraph_checkpoints']:.0f} of writegate's checkpoints are its write "
            f"subgraph's), {rest:.1f} ms elsewhere (graph engine, nodes, model)."
        )
        lines.append(
            f"CPU of the whole Python process per operation: {b['process_cpu_ms']:.1f} ms "
            f"baseline vs {w['process_cpu_ms']:.1f} ms writegate."
        )
    for mode in ("async", "exit"):
        if mode in modes:
            b, w = modes[mode]["baseline"], modes[mode]["writegate"]
            where = (
                "in a background thread, overlapping the next step"
                if mode == "async"
                else "only at the interrupt and at the end"
            )
            lines.append(
                f"durability={mode}: median {b['median_total_ms']:.1f} ms baseline vs "
                f"{w['median_total_ms']:.1f} ms writegate (ratio "
                f"{modes[mode]['ratio_of_medians']:.2f}); checkpoints are saved {where}, "
                f"while the ledger's {w['ledger_and_domain_ms']:.1f} ms stay on the critical path."
            )
    return lines
