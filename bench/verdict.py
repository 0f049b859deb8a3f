"""What the figures add up to: writegate's extra time in commits and round trips.

The counts (part 3) say how many more durable commits and round trips a writegate
operation makes than a baseline one; part 2 says what one commit and one round trip
cost on this machine. Their product is a prediction of the extra time, set against
the extra measured in part 1, so a reader can tell which of the two dominates here and
what the same counts would cost on a machine with faster commits.
"""

from __future__ import annotations

from typing import Any

FRAME_COMMIT_MS = 0.25  # the design frame's durable single-row commit on loopback


def explain_cost(results: dict[str, Any]) -> dict[str, Any]:
    compare, counts, ledger = results["compare"], results["counts"], results["ledger"]
    wg, base = counts["paths"]["writegate"], counts["paths"]["baseline"]
    d_commits = wg["durable_commits_per_op"] - base["durable_commits_per_op"]
    d_trips = wg["round_trips_per_op"] - base["round_trips_per_op"]
    commit_ms = ledger["single_row_commits"][0]["median_ms"]
    trip_ms = ledger["round_trip"]["median_ms"]
    flush_ms = max(commit_ms - trip_ms, 0.0)  # a commit is a round trip plus a WAL flush
    predicted = d_commits * flush_ms + d_trips * trip_ms
    measured = compare["writegate"]["median_ms"] - compare["baseline"]["median_ms"]
    at_frame = d_commits * max(FRAME_COMMIT_MS - trip_ms, 0.0) + d_trips * trip_ms
    ratio = compare["ratio"]["ratio_of_medians"]
    base_ms, wg_ms = compare["baseline"]["median_ms"], compare["writegate"]["median_ms"]
    commit_part, trip_part = d_commits * flush_ms, d_trips * trip_ms
    cpu_base = compare["process_cpu"]["baseline"]["median_ms"]
    cpu_wg = compare["process_cpu"]["writegate"]["median_ms"]
    lines = [
        f"writegate/baseline = {ratio:.2f}: writegate takes {measured:.1f} ms more per write "
        f"(medians {base_ms:.1f} vs {wg_ms:.1f} ms).",
        f"Counted: {d_commits:+.1f} durable commits and {d_trips:+.1f} round trips per write "
        f"({wg['durable_commits_per_op']:.0f} vs {base['durable_commits_per_op']:.0f} commits, "
        f"{wg['round_trips_per_op']:.0f} vs {base['round_trips_per_op']:.0f} round trips); of "
        f"the commits, {counts['ledger_commits_per_write']:.0f} are the ledger's.",
        f"Here one commit costs {commit_ms:.2f} ms and one round trip {trip_ms:.3f} ms, so "
        f"those predict {commit_part:.1f} ms (commit flushes) + {trip_part:.1f} ms (round trips)"
        f" = {predicted:.1f} ms of the {measured:.1f} ms measured.",
        f"The rest is CPU: the Python process spends {cpu_wg - cpu_base:.1f} ms more per write "
        f"(median {cpu_base:.1f} vs {cpu_wg:.1f} ms), stretched further when cores are busy.",
        f"With the design frame's {FRAME_COMMIT_MS} ms commit and the round trip measured here, "
        f"the same counts would cost {at_frame:.1f} ms per write, plus that CPU.",
    ]
    return {
        "extra_durable_commits": round(d_commits, 2),
        "extra_round_trips": round(d_trips, 2),
        "commit_ms": commit_ms,
        "round_trip_ms": trip_ms,
        "predicted_extra_ms": round(predicted, 2),
        "measured_extra_ms": round(measured, 2),
        "predicted_extra_ms_at_frame_commit": round(at_frame, 2),
        "extra_process_cpu_ms": round(cpu_wg - cpu_base, 2),
        "lines": lines,
    }
