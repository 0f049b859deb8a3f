"""`writegate webhooks`: a tenant's endpoints, the deliverer, failing deliveries, replay.

Every command touches only writegate's own tables (`webhook_endpoints`, `outbox`).
`deliver --loop` runs as many times, in as many processes, as you like: deliverers
claim with SKIP LOCKED and never share a delivery; a database that goes away (a
restart, a failover) is reported and the next round runs on new connections.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from datetime import timedelta
from typing import Annotated, Any

import typer

from writegate.approval.errors import NotFound, ValidationFailed
from writegate.approval.events import EVENT_TYPES, DeliveryPolicy
from writegate.approval.views import PageArgs
from writegate.checkpoints.outage import is_outage
from writegate.surfaces.cli.admin import Cursor, Limit, OrderOption, print_next_cursor
from writegate.surfaces.cli.common import console, database_url, err_console
from writegate.surfaces.cli.terminal import inert, markup_safe

PUBLIC_URL_ENV = "WRITEGATE_PUBLIC_URL"
webhooks_app = typer.Typer(
    help="Signed webhooks: endpoints per tenant, the deliverer, failing deliveries.",
    no_args_is_help=True,
)
Tenant = Annotated[str | None, typer.Option("--tenant", help="Only this tenant's rows.")]
AsJson = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]


def register(app: typer.Typer) -> None:
    app.add_typer(webhooks_app, name="webhooks")


def _outbox() -> Any:
    from writegate.checkpoints.outbox import PgOutbox
    from writegate.checkpoints.pool import open_pool

    return PgOutbox(open_pool(database_url(), max_size=1))


def _print_json(value: Any) -> None:
    print(json.dumps(value, ensure_ascii=False, indent=2, default=str))


@webhooks_app.command("add")
def add(
    url: Annotated[str, typer.Argument(help="Where to POST the tenant's events.")],
    tenant: Annotated[str, typer.Option("--tenant", help="The tenant whose events go there.")],
    event: Annotated[
        list[str] | None,
        typer.Option("--event", help=f"Only this type (repeatable): {', '.join(EVENT_TYPES)}."),
    ] = None,
    expiring_within: Annotated[
        float,
        typer.Option("--expiring-within", min=1.0, help="Seconds before expiry to warn."),
    ] = 300.0,
    as_json: AsJson = False,
) -> None:
    """Add an endpoint for a tenant; prints its signing secret (`whsec_...`), once."""
    from writegate.surfaces.webhooks import checked_url, new_endpoint_id, new_secret

    unknown = sorted(set(event or ()) - set(EVENT_TYPES))
    if unknown:
        raise ValidationFailed(f"unknown event type {unknown[0]!r}: use {', '.join(EVENT_TYPES)}")
    secret = new_secret()
    outbox = _outbox()
    try:
        endpoint = outbox.add_endpoint(
            endpoint_id=new_endpoint_id(),
            tenant_id=tenant,
            url=checked_url(url),
            secret=secret,
            event_types=event,
            expiring_within=timedelta(seconds=expiring_within),
        )
    finally:
        outbox.pool.close()
    if as_json:
        _print_json({**endpoint.__dict__, "secret": secret})
        return
    console.print(inert(f"added {endpoint.endpoint_id} for tenant {tenant}: {endpoint.url}"))
    console.print(inert(f"signing secret (shown once): {secret}"))


@webhooks_app.command("list")
def list_endpoints(
    tenant: Tenant = None,
    as_json: AsJson = False,
    limit: Limit = 1000,
    cursor: Cursor = None,
    order: OrderOption = "oldest",
) -> None:
    """List the endpoints (never their secrets), a page at a time."""
    outbox = _outbox()
    try:
        args = PageArgs(limit=limit, cursor=cursor, order=order)  # type: ignore[arg-type]  # checked
        endpoints = outbox.endpoints(tenant, args)
    finally:
        outbox.pool.close()
    if endpoints.next_cursor is not None:  # on standard error: standard output stays the list
        print_next_cursor(endpoints.next_cursor, err_console)
    if as_json:
        _print_json([e.__dict__ for e in endpoints])
        return
    if not endpoints:
        console.print("no endpoints")
    for e in endpoints:
        types = ",".join(e.event_types) if e.event_types else "all events"
        line = f"{e.endpoint_id}  tenant {e.tenant_id}  {e.url}  {types}  warn {e.expiring_within}"
        console.print(inert(line))


@webhooks_app.command("remove")
def remove(
    endpoint_id: Annotated[str, typer.Argument(help="The endpoint's id (ep_...).")],
    tenant: Tenant = None,
) -> None:
    """Remove an endpoint: nothing more is sent to it; its deliveries stay as history."""
    outbox = _outbox()
    try:
        removed = outbox.remove_endpoint(endpoint_id, tenant)
    finally:
        outbox.pool.close()
    if not removed:
        raise NotFound(f"no endpoint {endpoint_id!r}")
    console.print(inert(f"removed {endpoint_id}"))


@webhooks_app.command("failing")
def failing(
    tenant: Tenant = None,
    min_attempts: Annotated[
        int, typer.Option("--min-attempts", min=1, help="Attempts made, at least.")
    ] = 3,
    limit: Limit = 100,
    cursor: Cursor = None,
    order: OrderOption = "oldest",
    as_json: AsJson = False,
) -> None:
    """List deliveries that keep failing: not accepted after --min-attempts attempts,
    a page at a time; the line after a page says how to ask for the next."""
    outbox = _outbox()
    try:
        args = PageArgs(limit=limit, cursor=cursor, order=order)  # type: ignore[arg-type]  # checked
        rows = outbox.failing(min_attempts=min_attempts, tenant_id=tenant, args=args)
    finally:
        outbox.pool.close()
    if as_json:
        _print_json(rows)
    elif not rows:
        console.print("no failing deliveries")
    for row in [] if as_json else rows:
        console.print(inert(f"{row['delivery_id']}  {row['event_type']}  {row['event_id']}"))
        console.print(inert(f"  to {row['endpoint_id']} {row['url']}  tenant {row['tenant_id']}"))
        console.print(inert(f"  {row['attempts']} attempts, last: {row['last_error']}"))
        console.print(inert(f"  next {row['next_attempt_at']}"))
    if not as_json:
        print_next_cursor(rows.next_cursor)
    elif rows.next_cursor is not None:  # the rows alone on standard output
        print_next_cursor(rows.next_cursor, err_console)


@webhooks_app.command("replay")
def replay(
    delivery_id: Annotated[int, typer.Argument(help="The delivery's id (from `failing`).")],
    tenant: Tenant = None,
) -> None:
    """Send one delivery again now, under the same webhook-id, delivered or not."""
    outbox = _outbox()
    try:
        row = outbox.replay(delivery_id, tenant)
    finally:
        outbox.pool.close()
    if row is None:
        raise NotFound(f"no delivery {delivery_id}")
    console.print(inert(f"delivery {delivery_id} ({row['event_id']}) is due now"))


@webhooks_app.command("deliver")
def deliver(
    loop: Annotated[bool, typer.Option("--loop", help="Keep delivering until stopped.")] = False,
    interval: Annotated[
        float, typer.Option("--interval", min=0.01, help="Seconds between rounds with --loop.")
    ] = 1.0,
    batch: Annotated[int, typer.Option("--batch", min=1, help="Claims per round.")] = 50,
    lease: Annotated[float, typer.Option("--lease", min=0.1, help="Lease seconds.")] = 60.0,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0.05, help="Seconds to wait for an endpoint.")
    ] = 10.0,
    backoff: Annotated[
        float, typer.Option("--backoff", min=0.0, help="Seconds before a retry (doubled).")
    ] = 5.0,
    backoff_max: Annotated[
        float, typer.Option("--backoff-max", min=0.0, help="The longest wait between retries.")
    ] = 3600.0,
    public_url: Annotated[
        str | None,
        typer.Option("--public-url", help=f"Base of the approval links (else ${PUBLIC_URL_ENV})."),
    ] = None,
) -> None:
    """Send due events to their endpoints, signed; at least once, with retries."""
    from writegate.checkpoints.outbox import PgOutbox
    from writegate.checkpoints.pool import open_pool
    from writegate.surfaces.webhooks import deliverer

    if timeout >= lease:
        raise ValidationFailed("--timeout must be shorter than --lease")
    policy = DeliveryPolicy(lease=lease, timeout=timeout, backoff=backoff, backoff_max=backoff_max)
    base = public_url or os.environ.get(PUBLIC_URL_ENV, "").strip() or None
    stop = threading.Event()
    if loop:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
    pool = open_pool(database_url(), max_size=2)
    worker, sender = deliverer(PgOutbox(pool), policy, base_url=base)
    delivered = failed = 0
    try:
        while True:
            try:
                done = worker.run_once(limit=batch)
            except Exception as exc:
                if not (loop and is_outage(exc)):
                    raise
                err_console.print(f"database unavailable, retrying: {markup_safe(exc)}")
            else:
                delivered, failed = delivered + done.delivered, failed + done.failed
                if loop and (done.delivered or done.failed):
                    console.print(f"delivered {done.delivered}, failed {done.failed}")
                if loop and done.delivered + done.failed >= batch and not stop.is_set():
                    continue  # a full batch: more may be due now
            if not loop or stop.wait(interval):
                break
    finally:
        sender.close()
        pool.close()
    if not loop:
        console.print(f"delivered {delivered}, failed {failed}")
