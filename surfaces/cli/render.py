"""Terminal rendering shared by the commands (`approve`, `reconcile`, `threads`, `keys`) and,
handed to them by the composition point (`writegate.console`), the demo's `writegate
demo` and `writegate chat`.

Turns writegate's machine values into something a person can read: an approval
request (the interrupt value) as a preview table, a receipt, a structured error, the
messages of a conversation and audit rows; and setup failures as an error panel
instead of a traceback. Rendering never changes a value: display
strings sit next to the machine values they describe, not in place of them. Every
value from outside (model, user, database) is shown through `terminal.py`, so escape
sequences and rich markup in it are shown inert.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import typer
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from rich import box
from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from writegate.approval.canonical import to_rfc3339
from writegate.approval.errors import WritegateError
from writegate.approval.views import ProposalView
from writegate.approval.wire import as_executed
from writegate.checkpoints.database import DatabaseUnavailable
from writegate.checkpoints.migrate import MigrationError
from writegate.graph.messages import executed_values
from writegate.surfaces.cli.terminal import clean, inert

_AUDIT_LABELS = {"audit_id": "#", "tool_name": "tool", "error_code": "error"}
_RECEIPT_KEYS = ("execution_id", "request_key", "operation", "provider_ref", "completed_at")


def _short(value: Any, limit: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = clean(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@contextmanager
def reported_errors(console: Console) -> Iterator[None]:
    """Show setup and protocol failures as a structured error and exit 2, no traceback."""
    try:
        yield
    except DatabaseUnavailable as exc:
        console.print(
            error_panel({"code": "database_unavailable", "message": str(exc)}, title="error")
        )
        raise typer.Exit(2) from exc
    except MigrationError as exc:
        console.print(error_panel({"code": "schema_mismatch", "message": str(exc)}, title="error"))
        raise typer.Exit(2) from exc
    except WritegateError as exc:
        console.print(error_panel(exc.to_dict(), title="error"))
        raise typer.Exit(2) from exc


def preview_table(request: Mapping[str, Any]) -> Table:
    """An approval request as a table: operation, target, each argument, impact, expiry."""
    preview = request.get("preview") or {}
    table = Table(
        title=inert(f"Approval needed: {preview.get('title', request.get('operation', '?'))}"),
        title_justify="left",
        show_header=True,
        header_style="bold",
    )
    table.add_column("", style="bold cyan", no_wrap=True)
    table.add_column("shown to you")
    table.add_column("exact value executed", style="dim")
    table.add_row("operation", inert(request.get("operation", "")), "")
    table.add_row("target", inert(preview.get("target", request.get("resource", ""))), "")
    for field in preview.get("fields", []):
        table.add_row(
            inert(field.get("name")),
            inert(field.get("display")),
            inert(_short(field.get("value"), 80)),
        )
    table.add_row("impact", inert(preview.get("impact", ""), style="yellow"), "")
    flags = [
        flag
        for flag, on in (("irreversible", preview.get("irreversible")),
                         ("external", preview.get("external")))
        if on
    ]  # fmt: skip
    if flags:
        table.add_row("side effect", Text(", ".join(flags), style="bold red"), "")
    table.add_row("expires", inert(request.get("expires_at", "")), "")
    table.add_row("proposal", inert(request.get("proposal_id", "")), "")
    return table


def proposal_table(view: ProposalView) -> Table:
    """A proposal as its question shows it (`preview_table`), from the ledger's view."""
    return preview_table({
        "operation": view.operation,
        "resource": view.resource,
        "preview": view.preview,
        "expires_at": to_rfc3339(view.expires_at),
        "proposal_id": view.proposal_id,
    })  # fmt: skip


def expiry_text(value: Any) -> str:
    """An RFC 3339 expiry as "2026-11-30 15:26:01 UTC" (the server's clock decides)."""
    try:
        moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return clean(value)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def error_panel(error: Mapping[str, Any], *, title: str = "refused") -> Panel:
    """A structured error {code, message, retryable, ...} without any stack trace."""
    lines = Text()
    lines.append(clean(error.get("code", "error")), style="bold red")
    lines.append(f"  {clean(error.get('message', ''))}\n")
    lines.append(f"retryable: {bool(error.get('retryable'))}", style="dim")
    if error.get("advice"):
        lines.append(f"\nadvice: {clean(error['advice'])}", style="italic")
    details = error.get("details")
    if isinstance(details, Mapping):
        shown = {k: v for k, v in details.items() if k != "receipt"}
        if shown:
            lines.append(f"\ndetails: {_short(shown, 240)}", style="dim")
    return Panel(lines, title=inert(title), title_align="left", border_style="red", expand=False)


def receipt_panel(receipt: Mapping[str, Any], *, title: str = "receipt") -> Panel:
    """A receipt: what ran, under which request key, with the downstream's reference."""
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold green", no_wrap=True)
    table.add_column()
    table.add_row("status", inert(receipt.get("status", "")))
    for key in _RECEIPT_KEYS:
        if receipt.get(key) is not None:
            table.add_row(key, inert(receipt[key]))
    table.add_row("args_digest", inert(receipt.get("args_digest", "")))
    result = receipt.get("result") or {}
    if isinstance(result, Mapping):
        for key in ("refund_id", "ticket_id", "amount_minor", "currency"):
            if key in result:
                table.add_row(key, inert(result[key]))
    return Panel(table, title=inert(title), title_align="left", border_style="green", expand=False)


def tool_content(message: ToolMessage) -> dict[str, Any]:
    """A ToolMessage's JSON body (writegate always sends JSON objects)."""
    try:
        body = json.loads(str(message.content))
    except json.JSONDecodeError:
        return {"status": "ok", "text": str(message.content)}
    return body if isinstance(body, dict) else {"status": "ok", "value": body}


def is_receipt(body: Mapping[str, Any]) -> bool:
    return "execution_id" in body and "request_key" in body and "status" in body


def _call_line(call: Mapping[str, Any], executed: Mapping[str, Any] | None) -> Text:
    """The model's call with the values that ran: an edit replaces the model's values."""
    args, edited = as_executed(dict(call["args"]), dict(executed) if executed else None)
    shown = ", ".join(f"{k}={v!r}" for k, v in args.items())
    note = f"  (edited by the approver: {', '.join(edited)})" if edited else ""
    return inert(f"  model calls {call['name']}({shown}){note}", style="dim")


def message_renderable(
    message: BaseMessage, executed: Mapping[str, Mapping[str, Any]] | None = None
) -> RenderableType | None:
    """One conversation message, or None for what a person need not see. `executed`
    (from `executed_values`) lets a tool call show the values that ran."""
    if isinstance(message, HumanMessage):
        return Text.assemble(("you: ", "bold cyan"), clean(message.text))
    if isinstance(message, AIMessage):
        parts: list[RenderableType] = []
        if message.text:
            parts.append(Text.assemble(("assistant: ", "bold magenta"), clean(message.text)))
        for call in message.tool_calls:
            ran = (executed or {}).get(str(call.get("id")))
            parts.append(_call_line(call, ran))
        return Group(*parts) if parts else None
    if isinstance(message, ToolMessage):
        body = tool_content(message)
        if is_receipt(body):
            return receipt_panel(body, title=f"receipt: {message.name}")
        if "code" in body and "status" not in body:
            return error_panel(body, title=f"{message.name}: not done")
        return inert(f"  {message.name} → {_short(body, 110)}", style="dim")
    return None


def render_messages(
    messages: Iterable[BaseMessage], context: Iterable[BaseMessage] | None = None
) -> list[RenderableType]:
    """`messages` rendered; `context` (the whole thread) supplies the receipts of calls
    whose results fall outside `messages`."""
    shown = list(messages)
    executed = executed_values([*(context or ()), *shown])
    return [r for r in (message_renderable(m, executed) for m in shown) if r is not None]


def print_messages(
    console: Console,
    messages: Iterable[BaseMessage],
    context: Iterable[BaseMessage] | None = None,
) -> None:
    """One message per line (console.print(*many) would run short ones together)."""
    for renderable in render_messages(messages, context):
        console.print(renderable)


def audit_table(rows: Iterable[Mapping[str, Any]], *, title: str) -> Table:
    """Audit rows, oldest first: one per tool call and ledger transition."""
    ordered = sorted(rows, key=lambda r: int(r.get("audit_id") or 0))
    columns = ["audit_id", "user_id", "tenant_id", "tool_name", "event", "status", "error_code"]
    if len({r.get("tenant_id") for r in ordered}) < 2:
        columns.remove("tenant_id")  # one tenant: say it in the title, keep the table narrow
        title += f" (tenant {ordered[0].get('tenant_id')})" if ordered else ""
    table = Table(
        title=inert(title), title_justify="left", header_style="bold", box=box.SIMPLE_HEAD
    )
    for column in columns:
        label = _AUDIT_LABELS.get(column, column.removesuffix("_id"))
        if column in ("status", "error_code"):
            table.add_column(label, overflow="fold", min_width=12)
        else:
            table.add_column(label, no_wrap=True)
    for row in ordered:
        table.add_row(*(inert(row.get(c) or "", style="red" if c == "error_code" else "")
                        for c in columns))  # fmt: skip
    return table
