"""Rich tables for parts 1c and 4-6: the middleware pair, the confirm storms, storage and scale."""

from __future__ import annotations

from typing import Any

from rich.table import Table


def _ok(flag: bool) -> str:
    return "[green]met[/green]" if flag else "[red]missed[/red]"


def storm_table(r: dict[str, Any]) -> Table:
    s = r["storm"]
    t = Table(
        title=f"4. Confirm storm: {s['concurrent_confirms']} concurrent confirm+execute of "
        f"one proposal, {s['rounds']} rounds"
    )
    _storm_row(t, "executions per round", s["executions_per_round"], s)
    c = s["cpu_per_answer"]
    t.caption = (
        f"CPU of each answer's own thread: p50 {c['median_ms']:.2f} ms, p99 "
        f"{c['p99_ms']:.2f} ms; a round's {s['concurrent_confirms']} answers take "
        f"{s['cpu_per_round_ms']:.0f} ms of it (median of rounds), and one interpreter "
        "runs one thread's Python at a time."
    )
    return t


def _storm_row(t: Table, counted: str, per_round: list[int], s: dict[str, Any]) -> None:
    for col in (counted, "exactly one", "p50 ms", "p99 ms", "answers"):
        t.add_column(col)
    lat = s["latency"]
    answers = ", ".join(f"{k}: {v}" for k, v in sorted(s["answers"].items()))
    t.add_row(str(per_round), _ok(s["exactly_one_every_time"]), f"{lat['median_ms']:.1f}",
              f"{lat['p99_ms']:.1f}", answers)  # fmt: skip


def middleware_table(r: dict[str, Any]) -> Table:
    m = r.get("middleware") or {}
    if "ratio" not in m:
        return Table(title=f"1c. wg.middleware() vs HumanInTheLoopMiddleware: {m.get('skipped')}")
    t = Table(
        title=f"1c. create_agent with wg.middleware() vs with HumanInTheLoopMiddleware "
        f"({m['operations_each']} each, interleaved; same model, tool list and saver)"
    )
    for col in ("agent", "median ms", "p95 ms", "p99 ms", "CPU ms (median)"):
        t.add_column(col, justify="left" if col == "agent" else "right")
    for kind in ("langchain_hitl", "writegate_middleware"):
        s = m[kind]
        t.add_row(kind, f"{s['median_ms']:.2f}", f"{s['p95_ms']:.2f}", f"{s['p99_ms']:.2f}",
                  f"{m['process_cpu'][kind]['median_ms']:.2f}")  # fmt: skip
    ratio = m["ratio"]
    low, high = ratio["bootstrap_ci95"]
    t.caption = (
        f"writegate_middleware/langchain_hitl: {ratio['ratio_of_medians']:.3f} (95% bootstrap "
        f"CI {low:.3f}-{high:.3f}). Target <= {m['target_ratio']} (aim {m['aim_ratio']}): "
        f"{_ok(m['meets_target'])}"
    )
    return t


def http_storm_table(r: dict[str, Any]) -> Table:
    h = r.get("http_storm") or {}
    if "latency" not in h:
        return Table(title=f"4b. HTTP confirm storm: {h.get('skipped')}")
    t = Table(
        title=f"4b. HTTP confirm storm: {h['clicks_per_round']} concurrent clicks on one "
        f"proposal over {h['replicas']} `writegate serve` replicas, {h['rounds']} rounds"
    )
    _storm_row(t, "refunds per round", h["refunds_per_round"], h)
    return t


def storage_tables(r: dict[str, Any]) -> list[Table]:
    st = r["storage"]
    per = st["per_operation"]
    t = Table(
        title=f"5. Bytes on disk per write operation ({per['operations_each']} operations "
        "each, fresh threads)"
    )
    groups = list(next(iter(per["bytes_per_operation"].values())))
    t.add_column("graph")
    for g in groups:
        t.add_column(g, justify="right")
    for kind, row in per["bytes_per_operation"].items():
        t.add_row(kind, *(f"{row[g]:,.0f}" for g in groups))
    t2 = Table(title="5b. One thread, many operations (messages cleared at each operation)")
    for col in (
        "pruning",
        "operations",
        "disk added",
        "per op",
        "thread live bytes at end",
        "checkpoints kept",
        "prune ms (median)",
    ):
        t2.add_column(col, justify="left" if col == "pruning" else "right")
    for v in st["one_thread"].values():
        end = v["curve"][-1]
        prune = v.get("prune_cost", {}).get("median_ms")
        t2.add_row(
            v["pruning"],
            str(v["operations"]),
            f"{sum(v['disk_bytes_added'].values()):,}",
            f"{v['disk_bytes_per_operation']['total']:,.0f}",
            f"{end['thread_live_bytes']:,}",
            str(end["checkpoints"]),
            f"{prune:.2f}" if prune is not None else "-",
        )
    return [t, t2]


def scale_table(r: dict[str, Any]) -> Table:
    s = r["scale"]
    small, large = s["results"]
    t = Table(
        title=f"6. Scale: {small['proposals']:,} vs {large['proposals']:,} proposals "
        f"({small['pending']:,} vs {large['pending']:,} pending)"
    )
    for col in (
        "query",
        f"{small['proposals']:,} rows",
        f"{large['proposals']:,} rows",
        "index scan",
        f"no index, {small['proposals']:,}",
        f"no index, {large['proposals']:,}",
    ):
        t.add_column(col, justify="left" if col == "query" else "right")
    g = s["growth"]
    rows = (
        ("list a user's pending (ms)", "list_pending", g["list_pending_ms"]),
        ("find stale, nothing left (ms)", "expire_stale", g["stale_probe_ms"]),
        ("backlog pickup, empty (ms)", "reconcile_backlog", g["backlog_probe_ms"]),
    )
    for label, key, (a, b) in rows:
        na, nb = g["without_index_probe_ms"][key]
        used = small["index_used"][key] and large["index_used"][key]
        t.add_row(label, f"{a:.3f}", f"{b:.3f}", _ok(used), f"{na:.3f}", f"{nb:.3f}")
    ea, eb = g["expire_us_per_row"]
    t.add_row(
        "expire sweep, expire_if_due (us per expired row)", f"{ea:.0f}", f"{eb:.0f}", "", "", ""
    )
    t.add_row(
        "seed, PgLedgerTx.load (s)",
        f"{small['seed_seconds']:.2f}",
        f"{large['seed_seconds']:.2f}",
        "",
        "",
        "",
    )
    rec_a, rec_b = small["reconcile"], large["reconcile"]
    t.add_row(
        "reconcile backlog (s total)",
        f"{rec_a['seconds']:.2f}",
        f"{rec_b['seconds']:.2f}",
        "",
        "",
        "",
    )
    t.caption = f"Reconcile: {large['reconcile']['with']}."
    return t
