"""What `writegate chat` runs: a terminal conversation on a durable thread.

The thread lives in PostgreSQL (LangGraph's checkpointer plus writegate's ledger), so
a chat can be left and resumed later by its thread id; approvals still pending are
asked first. An approval is answered at its own explicit prompt (confirm, decline,
cancel, edit, or later to leave it pending), never from the chat box: "yes" typed in
the chat is a message to the model and confirms nothing. The prompts are the command
line's (`CommandLine.answer_all`, `read_line`), as every terminal question of writegate.

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

from writegate import Writegate
from writegate.demo.cli.kit import CommandLine
from writegate.demo.model import describe_demo_model
from writegate.demo.runtime import demo_agent, open_demo

QUIT = ("/quit", "/exit")


def run_chat(cli: CommandLine, thread: str | None, user: str, tenant: str) -> None:
    """Chat as `user` of `tenant` on `thread` (a new one when None)."""
    thread_id = thread or f"chat-{uuid.uuid4().hex[:12]}"
    url = cli.database_url()
    with cli.reported_errors(cli.err_console):
        wg = open_demo(url)
    with wg:
        _offer_demo_data(cli, wg, tenant)
        graph = demo_agent(wg)
        config: Any = {"configurable": {"thread_id": thread_id, "user_id": user,
                                        "tenant_id": tenant}}  # fmt: skip
        shown_thread, who = cli.markup_safe(thread_id), cli.markup_safe(f"{user} in {tenant}")
        cli.console.print(f"[bold]thread[/bold] {shown_thread}  [bold]as[/bold] {who}")
        cli.console.print(f"[bold]model[/bold]  {cli.markup_safe(describe_demo_model())}")
        cli.console.print("[dim]/quit or Ctrl-D to leave; come back with "
                          f"`writegate chat --thread {shown_thread}`[/dim]")  # fmt: skip
        with contextlib.suppress(cli.left):
            _loop(cli, graph, config)
        cli.console.print(f"bye. resume with: writegate chat --thread {shown_thread}")


def _offer_demo_data(cli: CommandLine, wg: Writegate, tenant: str) -> None:
    """Seed the demo tenant on first use of an empty database, else say how to."""
    from writegate.demo.seed import DEMO_TENANT, foreign_rows, has_demo_data, seed_demo

    if tenant != DEMO_TENANT:
        return
    with wg.runtime.pool.connection() as conn, conn.transaction():
        if has_demo_data(conn):
            return
        if foreign_rows(conn) == 0:
            seed_demo(conn)
            cli.console.print("[dim]first use: loaded the demo data (user_42 owns ord_1001, "
                              "¥199.00); `writegate db reset` restores it later[/dim]")  # fmt: skip
            return
    cli.console.print("[yellow]the demo data is not loaded here: run `writegate db seed` "
                      "to try the examples (ord_1001, ...)[/yellow]")  # fmt: skip


def _loop(cli: CommandLine, graph: Any, config: Any) -> None:
    console = cli.console
    state = graph.get_state(config)
    history = state.values.get("messages", []) if state.values else []
    if history:
        console.print(f"[dim]resuming: {len(history)} message(s) so far; the last ones:[/dim]")
        cli.print_messages(console, history[-3:], context=history)
    pending = _in_order(state.interrupts)
    if pending:
        console.print(f"[bold yellow]{len(pending)} approval(s) waiting for you[/bold yellow]")
    while True:
        before = len(graph.get_state(config).values.get("messages", []))
        if pending:
            payload: Any = Command(resume=cli.answer_all([(i.id, i.value) for i in pending]))
        else:
            text = cli.read_line("[bold cyan]you ›[/bold cyan] ")
            if text in QUIT:
                raise cli.left
            if not text:
                continue
            payload = {"messages": [HumanMessage(text)]}
        try:
            out = graph.invoke(payload, config)
        except Exception as exc:  # a model or network failure: report it, keep the thread
            console.print(cli.error_panel({"code": "agent_error", "message": _describe(exc)}))
            pending = _in_order(graph.get_state(config).interrupts)
            continue
        new = [m for m in out.get("messages", [])[before:] if not isinstance(m, HumanMessage)]
        cli.print_messages(console, new)  # the person's own line is already on screen
        pending = _in_order(out.get("__interrupt__", []))


def _in_order(interrupts: Any) -> list[Interrupt]:
    """Ask in the order the model made the calls, not in the order the branches paused."""
    items = list(interrupts or [])
    return sorted(items, key=lambda i: str(getattr(i, "value", {}).get("tool_call_id", "")))


def _describe(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}".strip()[:300]
