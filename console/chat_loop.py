"""What `writegate chat` runs: a terminal conversation on a durable thread.

The thread lives in PostgreSQL (LangGraph's checkpointer plus writegate's ledger), so
a chat can be left and resumed later by its thread id; approvals still pending are
asked first. An approval is answered at its own explicit prompt (confirm, decline,
cancel, edit, or later to leave it pending), never from the chat box: "yes" typed in
the chat is a message to the model and confirms nothing.

On a database with no data at all, the first chat loads the demo data (so the README's
"refund ord_1001" works); on one holding other data, it says `writegate db seed` is
needed instead of writing demo rows into it.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

from langchain_core.messages import HumanMessage
from langgraph.types import Command, Interrupt

from writegate.approval.canonical import CanonicalizationError, check_input
from writegate.approval.money import (
    CURRENCIES,
    AmountError,
    format_major,
    format_minor,
    parse_major,
)
from writegate.demo.model import demo_chat_model, describe_demo_model
from writegate.demo.prompt import DEMO_PROMPT
from writegate.demo.runtime import open_demo
from writegate.graph.build import build_graph
from writegate.runtime.wiring import Runtime
from writegate.surfaces.cli.common import console, database_url, err_console
from writegate.surfaces.cli.render import (
    error_panel,
    expiry_text,
    preview_table,
    print_messages,
    reported_errors,
)
from writegate.surfaces.cli.terminal import markup_safe

DECISIONS = ("confirm", "decline", "cancel", "edit", "later")
QUIT = ("/quit", "/exit")


class LeaveChat(Exception):
    """The person quit (/quit, Ctrl-D, or "later" at an approval)."""


def run_chat(thread: str | None, user: str, tenant: str) -> None:
    """Chat as `user` of `tenant` on `thread` (a new one when None)."""
    thread_id = thread or f"chat-{uuid.uuid4().hex[:12]}"
    url = database_url()
    with reported_errors(err_console):
        runtime = open_demo(url)
    with runtime:
        _offer_demo_data(runtime, tenant)
        graph = build_graph(
            runtime,
            model=demo_chat_model(runtime.registry.openai_tools()),
            checkpointer=runtime.checkpointer,
            system_prompt=DEMO_PROMPT,
        )
        config: Any = {"configurable": {"thread_id": thread_id, "user_id": user,
                                        "tenant_id": tenant}}  # fmt: skip
        shown_thread, who = markup_safe(thread_id), markup_safe(f"{user} in {tenant}")
        console.print(f"[bold]thread[/bold] {shown_thread}  [bold]as[/bold] {who}")
        console.print(f"[bold]model[/bold]  {markup_safe(describe_demo_model())}")
        console.print("[dim]/quit or Ctrl-D to leave; come back with "
                      f"`writegate chat --thread {shown_thread}`[/dim]")  # fmt: skip
        with contextlib.suppress(LeaveChat):
            _loop(graph, config)
        console.print(f"bye. resume with: writegate chat --thread {shown_thread}")


def _offer_demo_data(runtime: Runtime, tenant: str) -> None:
    """Seed the demo tenant on first use of an empty database, else say how to."""
    from writegate.demo.seed import DEMO_TENANT, foreign_rows, has_demo_data, seed_demo

    if tenant != DEMO_TENANT:
        return
    with runtime.pool.connection() as conn, conn.transaction():
        if has_demo_data(conn):
            return
        if foreign_rows(conn) == 0:
            seed_demo(conn)
            console.print("[dim]first use: loaded the demo data (user_42 owns ord_1001, "
                          "¥199.00); `writegate db reset` restores it later[/dim]")  # fmt: skip
            return
    console.print("[yellow]the demo data is not loaded here: run `writegate db seed` "
                  "to try the examples (ord_1001, ...)[/yellow]")  # fmt: skip


def _loop(graph: Any, config: Any) -> None:
    state = graph.get_state(config)
    history = state.values.get("messages", []) if state.values else []
    if history:
        console.print(f"[dim]resuming: {len(history)} message(s) so far; the last ones:[/dim]")
        print_messages(console, history[-3:], context=history)
    pending = _in_order(state.interrupts)
    if pending:
        console.print(f"[bold yellow]{len(pending)} approval(s) waiting for you[/bold yellow]")
    while True:
        before = len(graph.get_state(config).values.get("messages", []))
        if pending:
            payload: Any = Command(resume=_answer_all(pending))
        else:
            text = _read("[bold cyan]you ›[/bold cyan] ")
            if text in QUIT:
                raise LeaveChat
            if not text:
                continue
            payload = {"messages": [HumanMessage(text)]}
        try:
            out = graph.invoke(payload, config)
        except Exception as exc:  # a model or network failure: report it, keep the thread
            console.print(error_panel({"code": "agent_error", "message": _describe(exc)}))
            pending = _in_order(graph.get_state(config).interrupts)
            continue
        new = [m for m in out.get("messages", [])[before:] if not isinstance(m, HumanMessage)]
        print_messages(console, new)  # the person's own line is already on screen
        pending = _in_order(out.get("__interrupt__", []))


def _in_order(interrupts: Any) -> list[Interrupt]:
    """Ask in the order the model made the calls, not in the order the branches paused."""
    items = list(interrupts or [])
    return sorted(items, key=lambda i: str(getattr(i, "value", {}).get("tool_call_id", "")))


def _describe(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}".strip()[:300]


def _read(prompt: str) -> str:
    """A line typed by the person; one with control characters is refused, not sent."""
    while True:
        try:
            text = console.input(prompt).strip()
        except (EOFError, KeyboardInterrupt):
            console.print()
            raise LeaveChat from None
        try:
            check_input(text)
        except CanonicalizationError as exc:
            console.print(error_panel(exc.to_dict(), title="not sent"))
            continue
        return text


def _answer_all(pending: list[Interrupt]) -> dict[str, Any]:
    """One question at a time; the answers go back together as {interrupt_id: value}."""
    answers: dict[str, Any] = {}
    for number, item in enumerate(pending, start=1):
        if len(pending) > 1:
            console.rule(f"approval {number} of {len(pending)}")
        request = item.value if isinstance(item.value, dict) else {}
        if request.get("error"):
            console.print(error_panel(request["error"], title="your last answer was refused"))
        console.print(preview_table(request))
        answers[item.id] = _decide(request)
    return answers


def _decide(request: dict[str, Any]) -> dict[str, Any]:
    proposal_id = str(request.get("proposal_id", ""))
    while True:
        choice = _read(f"decision \\[{' / '.join(DECISIONS)}]: ").lower()
        if choice in DECISIONS:
            break
        if not choice:
            continue
        console.print(
            f"[yellow]{markup_safe(repr(choice))} is not a decision.[/yellow] "
            f"Type one of: {', '.join(DECISIONS)}"
        )
    if choice == "later":
        until = markup_safe(expiry_text(request.get("expires_at", "")))
        console.print(f"[dim]left pending until {until}; nothing was sent. It waits in the "
                      "database; after that it expires and nothing runs.[/dim]")  # fmt: skip
        raise LeaveChat
    if choice == "edit":
        return {"action": "edit", "proposal_id": proposal_id, "args": _edit_args(request)}
    return {"action": choice, "proposal_id": proposal_id}


def _edit_args(request: dict[str, Any]) -> dict[str, Any]:
    """Ask for each argument in preview order, showing its current value; Enter keeps it."""
    args: dict[str, Any] = dict(request.get("args") or {})
    fields = (request.get("preview") or {}).get("fields", [])
    displays = {f["name"]: str(f.get("display")) for f in fields if f.get("name") in args}
    order = [*displays, *(name for name in args if name not in displays)]
    currency = str(args.get("currency", ""))
    return {name: _ask_value(name, args[name], displays.get(name), currency) for name in order}


def _ask_value(name: str, current: Any, display: str | None, currency: str) -> Any:
    shown = repr(current) + (f" = {display}" if display and display != str(current) else "")
    while True:
        text = _read(markup_safe(f"  {name} (now {shown}; Enter keeps it): "))
        if not text:
            return current
        if not isinstance(current, int) or isinstance(current, bool):
            return text
        if text.isdigit():
            return int(text)  # a bare integer keeps its old meaning: minor units
        if name.endswith("_minor") and currency in CURRENCIES:
            try:
                return parse_major(text, currency)  # "10.00", "$10.00": exact, via Decimal
            except AmountError as exc:
                hint = _integer_hint(name, currency)
                console.print(f"[yellow]{markup_safe(exc)}: {markup_safe(hint)}[/yellow]")
                continue
        console.print(f"[yellow]{markup_safe(_integer_hint(name, currency))}[/yellow]")


def _integer_hint(name: str, currency: str) -> str:
    if name.endswith("_minor") and currency in CURRENCIES:
        example = format_minor(1000, currency)
        return (f"{name} takes an integer of minor units (1000) or an amount in "
                f"{currency} ({example} or {format_major(1000, currency)})")  # fmt: skip
    return f"{name} takes an integer"
