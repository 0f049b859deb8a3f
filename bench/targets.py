"""The targets, each next to the figure this run measured for it.

One row per target of the performance brief: the figure, the target, the aim, and
whether it was met; a figure this bench does not measure says why instead. Rows are
built from the parts' results, so the table and the JSON always agree.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

LEDGER_16_TODAY = 186.0  # ops/s at 16 clients when the target was set: the target is 3x it


def _row(
    figure: str, value: Any, target: str, aim: str, met: bool | None, note: str = ""
) -> dict[str, Any]:
    return {"figure": figure, "value": value, "target": target, "aim": aim, "met": met,
            "note": note}  # fmt: skip


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def _middleware_row(mw: dict[str, Any], peer: dict[str, Any] | None) -> dict[str, Any]:
    figure = ("writegate middleware in create_agent / LangChain HumanInTheLoopMiddleware in "
              "create_agent (median, interleaved)")  # fmt: skip
    agent = (
        f"; the writegate agent / the LangChain HITL agent (part 1): "
        f"{peer['writegate_agent_over_langchain_hitl']['ratio_of_medians']:.2f}x"
        if peer
        else ""
    )
    if "ratio" not in mw:
        return _row(figure, None, "<= 1.20x", "1.10x", None,
                    "not measured: " + mw.get("skipped", "part 1c did not run"))  # fmt: skip
    ratio = mw["ratio"]["ratio_of_medians"]
    wg, lc = mw["writegate_middleware"]["median_ms"], mw["langchain_hitl"]["median_ms"]
    return _row(figure, ratio, "<= 1.20x", "1.10x", ratio <= 1.20,
                f"{wg:.1f} vs {lc:.1f} ms, same model, tool list and saver{agent}")  # fmt: skip


def _http_storm_row(h: dict[str, Any]) -> dict[str, Any]:
    figure = "HTTP confirm storm, {} clicks over 2 `writegate serve` replicas: refunds / p99 ms"
    if "latency" not in h:
        return _row(figure.format(64), None, "1 / < 500 ms", "", None,
                    "not measured: " + h.get("skipped", "part 4b did not run"))  # fmt: skip
    p99 = h["latency"]["p99_ms"]
    return _row(
        figure.format(h["clicks_per_round"]),
        [max(h["refunds_per_round"]), p99], "1 / < 500 ms", "",
        h["exactly_one_every_time"] and p99 < 500,
        f"{h['rounds']} rounds; refunds per round {h['refunds_per_round']}",
    )  # fmt: skip


def build_targets(r: dict[str, Any]) -> list[dict[str, Any]]:
    compare, counts, ledger = r["compare"], r["counts"]["paths"], r["ledger"]["ledger"]
    ratio = compare["ratio"]["ratio_of_medians"]
    peer = compare.get("vs_langchain_hitl")
    wg_trips, base_trips = (counts[k]["round_trips_per_op"] for k in ("writegate", "baseline"))
    trips = _ratio(wg_trips, base_trips)
    per_op = r["storage"]["per_operation"]["bytes_per_operation"]
    wg_bytes, base_bytes = (per_op[k]["total"] for k in ("writegate", "baseline"))
    storage = _ratio(wg_bytes, base_bytes)
    one, sixteen = ledger[0], ledger[-1]
    storm = r["storm"]
    storm_p99 = storm["latency"]["p99_ms"]
    rows = [
        _row("writegate agent / naive graph, per write (median, interleaved)", ratio,
             "<= 1.20x", "1.10x", ratio <= 1.20),
        _middleware_row(r.get("middleware") or {}, peer),
        _row("ledger durable commits per write", counts["ledger"]["ledger_commits_per_op"],
             "<= 3", "3", counts["ledger"]["ledger_commits_per_op"] <= 3,
             "propose; decide+consume+claim; record (the confirm taken server-side); with a "
             f"presented token (HTTP, MCP): {counts['ledger_token']['ledger_commits_per_op']}"),
        _row("round trips per write / baseline's", trips, "<= 1.5x", "1.2x",
             trips is not None and trips <= 1.5,
             f"{wg_trips} vs {base_trips}"),
        _row("ledger-only operation in single-row commits' worth at 1 client",
             one["commits_worth"], "<= 10", "<= 6", one["commits_worth"] <= 10),
        _row("ledger-only throughput at 16 clients (ops/s)", sixteen["ops_per_s"],
             f">= 3x today ({LEDGER_16_TODAY:.0f}/s)", "",
             sixteen["ops_per_s"] >= 3 * LEDGER_16_TODAY),
        _row("storage per write / baseline's", storage, "<= 1.5x", "1.3x",
             storage is not None and storage <= 1.5,
             f"{wg_bytes / 1000:.1f} vs {base_bytes / 1000:.1f} kB"),
        _row(f"confirm storm {storm['concurrent_confirms']} clients: executions / p99 ms",
             [max(storm["executions_per_round"]), storm_p99], "1 / < 100 ms", "",
             storm["exactly_one_every_time"] and storm_p99 < 100,
             f"one interpreter: its answers' own CPU is {storm['cpu_per_round_ms']:.0f} ms "
             f"per round (p50 {storm['cpu_per_answer']['median_ms']:.2f} ms per answer)"),
        _http_storm_row(r.get("http_storm") or {}),
    ]  # fmt: skip
    return rows


def targets_table(rows: list[dict[str, Any]]) -> Table:
    t = Table(title="Targets: each figure of this run next to its target")
    for col in ("figure", "this run", "target", "aim", ""):
        t.add_column(col, justify="right" if col == "this run" else "left")
    for row in rows:
        value = row["value"]
        shown = (
            "n/a" if value is None
            else " / ".join(f"{v:g}" for v in value) if isinstance(value, list)
            else f"{value:g}"
        )  # fmt: skip
        met = row["met"]
        verdict = "" if met is None else "[green]met[/green]" if met else "[red]missed[/red]"
        figure = row["figure"] + (f"\n[dim]{row['note']}[/dim]" if row["note"] else "")
        t.add_row(figure, shown, row["target"], row["aim"], verdict)
    return t
