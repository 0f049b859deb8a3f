"""Small statistics for latency samples: percentiles, summaries and ratio spreads."""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from typing import Any

BOOTSTRAP_ROUNDS = 2000


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100]."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def summary_ms(seconds: Sequence[float]) -> dict[str, Any]:
    """Median, p95, p99, mean, min, max in milliseconds, and the count."""
    ms = [s * 1000 for s in seconds]
    return {
        "n": len(ms),
        "median_ms": round(statistics.median(ms), 3) if ms else None,
        "p95_ms": round(percentile(ms, 95), 3) if ms else None,
        "p99_ms": round(percentile(ms, 99), 3) if ms else None,
        "mean_ms": round(statistics.fmean(ms), 3) if ms else None,
        "min_ms": round(min(ms), 3) if ms else None,
        "max_ms": round(max(ms), 3) if ms else None,
    }


def ratio_spread(base: Sequence[float], other: Sequence[float], seed: int = 7) -> dict[str, Any]:
    """other/base: ratio of medians with a paired bootstrap 95% CI, and per-pair ratios.

    Samples are paired by index (operation i of each ran back to back), so resampling
    pairs keeps whatever the machine was doing at that moment on both sides.
    """
    pairs = list(zip(base, other, strict=True))
    if not pairs:
        return {"ratio_of_medians": None}
    rng = random.Random(seed)
    boots = []
    for _ in range(BOOTSTRAP_ROUNDS):
        sample = [pairs[rng.randrange(len(pairs))] for _ in pairs]
        boots.append(
            statistics.median(o for _, o in sample) / statistics.median(b for b, _ in sample)
        )
    per_pair = [o / b for b, o in pairs]
    return {
        "ratio_of_medians": round(statistics.median(other) / statistics.median(base), 3),
        "bootstrap_ci95": [round(percentile(boots, 2.5), 3), round(percentile(boots, 97.5), 3)],
        "per_pair_median": round(statistics.median(per_pair), 3),
        "per_pair_iqr": [round(percentile(per_pair, 25), 3), round(percentile(per_pair, 75), 3)],
    }
