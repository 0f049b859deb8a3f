"""The PNG chart of per-operation latency, baseline vs writegate vs LangChain HITL (Agg backend).

matplotlib comes with the `bench` dependency group (`uv sync --group bench`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never a display

import matplotlib.pyplot as plt

from writegate.bench.stats import percentile

CHART_NAME = "bench-latency.png"
COLORS = {"baseline": "#7f8c8d", "writegate": "#2e86de", "langchain_hitl": "#e67e22"}


def write_chart(results: dict[str, Any], out: Path) -> Path:
    compare = results["compare"]
    samples: dict[str, list[float]] = compare["samples_ms"]
    everything = [x for v in samples.values() for x in v]
    top = percentile(everything, 99) * 1.05
    fig, (hist, cdf) = plt.subplots(1, 2, figsize=(11, 4.2))
    bins = [top * i / 60 for i in range(61)]
    for kind, values in samples.items():
        median = compare[kind]["median_ms"]
        label = f"{kind} (median {median:.1f} ms, p95 {compare[kind]['p95_ms']:.1f} ms)"
        hist.hist(values, bins=bins, alpha=0.55, color=COLORS[kind], label=label)
        ordered = sorted(values)
        cdf.plot(
            ordered,
            [(i + 1) / len(ordered) for i in range(len(ordered))],
            color=COLORS[kind],
            label=kind,
        )
    hist.set_xlabel("ms per write operation (propose, interrupt, confirm, execute, answer)")
    hist.set_ylabel("operations")
    hist.legend(fontsize=8)
    cdf.set_xlabel("ms per write operation")
    cdf.set_ylabel("fraction of operations")
    cdf.set_xlim(0, top)
    cdf.grid(alpha=0.3)
    cdf.legend(fontsize=8)
    ratio = compare["ratio"]
    low, high = ratio["bootstrap_ci95"]
    fig.suptitle(
        f"writegate / baseline = {ratio['ratio_of_medians']:.2f}x (95% CI {low:.2f}-{high:.2f}), "
        f"{compare['operations_each']} interleaved operations each, same PostgreSQL"
    )
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / CHART_NAME
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
