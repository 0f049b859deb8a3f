"""Operations commands: `reconcile`, `escalations`, `stats`, `purge`, `provider serve`.

`writegate reconcile` settles unknown, failed_retryable and lease-expired executions
(once, or `--loop`); run it in as many processes and `--workers` as you like: they
claim with SKIP LOCKED and never share an execution. The downstream it asks is the
in-process simulator on the same database, or `--provider-url` /
`WRITEGATE_PROVIDER_URL` for the HTTP one (`writegate provider serve`). It claims only
executions of the tools it runs (the demo's); the others in the database belong to
applications that run their own reconciler (`wg.reconciler()`), and it says how many
it left. With `--loop`, a database that goes away (a restart, a failover to a standby)
does not stop it: the round is reported and the next one runs after the interval, on
connections the pool makes anew (to the new primary, with a multi-host URL).
"""

from __future__ import annotations

import json
import signal
import threading
from collections import Counter
from datetime import timedelta
from typing import Annotated, Any

import typer

from writegate.approval.errors import ValidationFailed, WritegateError, is_database_outage
from writegate.approval.reconcile import ReconcilePolicy, Reconciler, Settled
from writegate.approval.retention import RetentionPolicy
from writegate.approval.views import Page
from writegate.checkpoints.ops import PgBacklog, ledger_stats, list_escalations, purge
from writegate.checkpoints.outage import is_outage
from writegate.surfaces.cli.common import console, database_url, err_console, served_application
from writegate.surfaces.cli.terminal import inert, markup_safe


def register(app: typer.Typer) -> None:
    app.command("reconcile")(reconcile)
    app.command("escalations")(escalations)
    app.command("stats")(stats)
    app.command("purge")(purge_command)


def _print_json(value: Any) -> None:
    print(json.dumps(value, ensure_ascii=False, indent=2, default=str))


def _open_runtime(ctx: typer.Context, provider_url: str | None, connections: int) -> Any:
    from writegate.surfaces.served import open_served

    return open_served(
        database_url(),
        application=served_application(ctx),
        provider_url=provider_url,
        max_connections=connections,
    )


def reconcile(
    ctx: typer.Context,
    loop: Annotated[bool, typer.Option("--loop", help="Keep reconciling until stopped.")] = False,
    interval: Annotated[
        float, typer.Option("--interval", min=0.05, help="Seconds between rounds with --loop.")
    ] = 5.0,
    workers: Annotated[int, typer.Option("--workers", min=1, help="Parallel workers.")] = 1,
    batch: Annotated[int, typer.Option("--batch", min=1, help="Claims per round.")] = 20,
    lease: Annotated[float, typer.Option("--lease", min=0.1, help="Lease seconds.")] = 60.0,
    backoff: Annotated[
        float,
        typer.Option(
            "--backoff", min=0.0, help="Seconds before a check is repeated (doubled each time)."
        ),
    ] = ReconcilePolicy.backoff,
    provider_url: Annotated[
        str | None, typer.Option("--provider-url", help="HTTP provider (else in-process).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print each settlement.")] = False,
) -> None:
    """Settle executions whose outcome is unknown by looking them up at the provider."""
    rt = _open_runtime(ctx, provider_url, connections=workers + 2)
    policy = ReconcilePolicy(lease=timedelta(seconds=lease), backoff=backoff)
    stop = threading.Event()
    if loop:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
    settled: list[Settled] = []
    failures: list[BaseException] = []
    lock = threading.Lock()
    left: dict[str, int] = {}

    from writegate.surfaces.step_kill import kill_hook_from_env

    def work() -> None:
        hook = kill_hook_from_env()  # fault testing only
        worker = Reconciler(
            rt.service, PgBacklog(rt.pool), policy=policy, retry=rt.executor.retry, step_hook=hook
        )
        while True:
            try:
                done = worker.drain(limit=batch)
            except Exception as exc:  # e.g. the database went away: report, exit non-zero
                if loop and _outage(exc):  # looping: the next round goes on when it is back
                    err_console.print(f"database unavailable, retrying: {markup_safe(exc)}")
                    done = []
                else:
                    with lock:
                        failures.append(exc)
                    return
            with lock:
                settled.extend(done)
            if not loop or stop.wait(interval):
                return

    try:
        threads = [threading.Thread(target=work, name=f"reconcile-{i}") for i in range(workers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if not failures:
            left = Reconciler(rt.service, PgBacklog(rt.pool), policy=policy).left_to_others()
    finally:
        rt.close()
    if as_json:
        _print_json([s.__dict__ for s in settled])
    else:
        counts = Counter(f"{s.action} -> {s.status}" for s in settled)
        console.print(f"reconciled {len(settled)} execution(s)")
        for what, n in sorted(counts.items()):
            console.print(f"  {n:5d}  {what}")
    if left:
        err_console.print(markup_safe(left_note(left)))
    if failures:
        err_console.print(f"[red]error:[/red] a worker stopped: {markup_safe(failures[0])}")
        raise typer.Exit(1)


def _outage(exc: Exception) -> bool:
    if isinstance(exc, WritegateError):
        return is_database_outage(exc)
    return is_outage(exc)


def left_note(left: dict[str, int]) -> str:
    """What a reconcile run left to the applications that run those tools."""
    total = sum(left.values())
    tools = ", ".join(f"{name} ({n})" for name, n in sorted(left.items()))
    executions = "execution" if total == 1 else "executions"
    return f"left {total} {executions} of tools this process does not run: {tools}"


def escalations(
    tenant: Annotated[str | None, typer.Option("--tenant", help="Only this tenant.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many of each.")] = 100,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    kind: Annotated[
        str, typer.Option("--kind", help="execution, failover, or both (the default).")
    ] = "both",
    cursor: Annotated[
        str | None, typer.Option("--cursor", help="The next page, as the last one printed it.")
    ] = None,
    order: Annotated[str, typer.Option("--order", help="oldest (the default) or newest first.")] = (
        "oldest"
    ),
) -> None:
    """List what a person must decide: escalated executions (what was asked, by whom,
    what is known), then what the checks after a failover found (`kind` failover), a
    page of each at a time; the line after a page says how to ask for the next."""
    from writegate.approval.views import PageArgs
    from writegate.checkpoints.failover import list_failover_escalations
    from writegate.checkpoints.pool import open_pool
    from writegate.checkpoints.schema import setup_database
    from writegate.surfaces.cli.render import error_panel

    url = database_url()
    setup_database(url)  # a fresh database has no tables yet; this is idempotent
    pool = open_pool(url, max_size=1)
    try:
        if kind not in ("both", "execution", "failover") or (cursor and kind == "both"):
            raise ValidationFailed("--kind is execution or failover (with --cursor), or both")
        args = PageArgs(limit=limit, cursor=cursor, order=order)  # type: ignore[arg-type]  # checked
        empty: Page[dict[str, Any]] = Page()
        rows = list_escalations(pool, tenant_id=tenant, args=args) if kind != "failover" else empty
        after = (
            list_failover_escalations(pool, tenant_id=tenant, args=args)
            if kind != "execution"
            else empty
        )
    except WritegateError as exc:
        err_console.print(error_panel(exc.to_dict()))
        raise typer.Exit(1) from exc
    finally:
        pool.close()
    if as_json:
        _print_json(rows + after)
    elif not rows and not after:
        console.print("no escalations")
    else:
        print_escalations(rows)
        print_failover_escalations(after)
    shown = {"execution": rows, "failover": after}
    for name, page in shown.items():
        if kind in ("both", name) and page.next_cursor is not None:
            line = f"next page of {name} escalations: --kind {name} --cursor {page.next_cursor}"
            (err_console if as_json else console).print(inert(line), soft_wrap=True)


def print_escalations(rows: list[dict[str, Any]]) -> None:
    """Each escalation as a few lines; every stored value is shown inert."""
    for row in rows:
        title = (row.get("preview") or {}).get("title", row["operation"])
        console.print(inert(row["execution_id"], style="bold") + inert(f"  {title}"))
        who = f"tenant {row['tenant_id']}  user {row['subject']}  thread {row['thread_id']}"
        console.print(inert("  " + who))
        key = row["request_key"]
        console.print(inert(f"  request key {key}  (send it to the provider's support)"))
        console.print(inert(f"  arguments {json.dumps(row['args'], ensure_ascii=False)}"))
        why = json.dumps(row["escalation"], ensure_ascii=False, default=str)
        console.print(inert(f"  why {why}"))
        console.print(inert(f"  started {row['created_at']}  checks {row['checks']}"))
        for h in row["history"]:
            action = (h.get("result") or {}).get("action", "")
            line = f"    {h['created_at']}  {h['event']:9s} {h['status']:16s} {action}"
            console.print(inert(line))


def print_failover_escalations(rows: list[dict[str, Any]]) -> None:
    """Each failover escalation as a few lines; every stored value is shown inert."""
    for row in rows:
        why = row["escalation"]
        head = f"after failover (timeline {row['timeline_id']})  {row['operation']}"
        console.print(inert(head, style="bold") + inert(f"  {why.get('reason', '')}"))
        where = f"tenant {row['tenant_id']}  proposal {row['proposal_id'] or '(lost)'}"
        console.print(inert(f"  {where}  {row['proposal_status'] or ''}".rstrip()))
        if row["request_key"]:
            key = row["request_key"]
            console.print(inert(f"  request key {key}  (send it to the provider's support)"))
        if row["args"] is not None:
            console.print(inert(f"  arguments {json.dumps(row['args'], ensure_ascii=False)}"))
        console.print(inert(f"  why {json.dumps(why, ensure_ascii=False, default=str)}"))
        console.print(inert(f"  found {row['created_at']}"))


def stats(
    prometheus: Annotated[
        bool, typer.Option("--prometheus", help="Prometheus text format.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Duplicate requests, conflicts, unknown outcomes, backlog age, reconcile latency."""
    from writegate.checkpoints.pool import open_pool
    from writegate.checkpoints.schema import setup_database

    url = database_url()
    setup_database(url)  # a fresh database has no tables yet; this is idempotent
    pool = open_pool(url, max_size=1)
    try:
        if prometheus:
            from writegate.surfaces.metrics import prometheus_text

            print(prometheus_text(pool), end="")
            return
        data = ledger_stats(pool)
    finally:
        pool.close()
    if as_json:
        _print_json(data)
        return
    t, b, lat = data["totals"], data["backlog"], data["reconcile_latency"]
    console.print(
        f"execute requests {t['execute_requests']}, duplicates {t['duplicates']} "
        f"({t['duplicate_rate']:.1%})"
    )
    console.print(f"fingerprint conflicts {t['fingerprint_conflicts']}")
    console.print(f"unknown outcomes {t['unknown_outcomes']}, escalations {t['escalations']}")
    console.print(f"backlog {b['size']}, oldest {b['oldest_age_s']:.1f} s")
    if lat["count"]:
        console.print(
            f"reconcile latency: {lat['count']} settled, p50 {lat['p50_s']:.2f} s, "
            f"p95 {lat['p95_s']:.2f} s, max {lat['max_s']:.2f} s"
        )
    for row in data["open_executions"]:
        console.print(f"open: {row['operation']} {row['status']} {row['n']}")


def purge_command(
    days: Annotated[
        int | None,
        typer.Option("--days", min=0, help="Keep finished rows this long (default: env)."),
    ] = None,
    batch: Annotated[int, typer.Option("--batch", min=1)] = 500,
) -> None:
    """Delete finished ledger rows past retention, leaving tombstones for their keys."""
    from writegate.checkpoints.pool import open_pool
    from writegate.checkpoints.schema import setup_database

    policy = RetentionPolicy(days) if days is not None else RetentionPolicy.from_env()
    url = database_url()
    setup_database(url)  # a fresh database has no tables yet; this is idempotent
    pool = open_pool(url, max_size=1)
    try:
        report = purge(pool, policy, batch=batch)
    finally:
        pool.close()
    console.print(
        f"purged {report.executions} execution(s) and {report.proposals} other proposal(s) "
        f"finished before {report.cutoff.isoformat()}"
    )
