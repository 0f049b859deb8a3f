"""What `writegate demo` runs: one refund conversation end to end, then the replays that must fail.

Every run creates orders of its own (`ord_demo…`: ¥199.00 and $45.00 for user_42), so
the seeded walkthrough orders (ord_1001, ...) stay refundable for chat, curl and the
notebooks. Part 1 drives the real graph on a durable thread: user_42 asks for a refund
of the run's ¥199.00 order, the model looks the order up and proposes; the preview is
printed; a free-text "yes" is refused; the structured confirm executes it; the same
confirm sent again changes nothing. Part 2 works at the protocol level (the graph keeps
its token to itself): a second proposal, on the run's $45.00 order, is confirmed by
user_42 and its token is presented by the wrong user, the wrong tenant, then by user_42
twice. Every claim the demo prints about the provider is checked against the provider's
own table first.
"""

from __future__ import annotations

import uuid
from typing import Any

import typer
from langchain_core.messages import HumanMessage
from langgraph.types import Command

from writegate.approval.decisions import Confirm
from writegate.approval.errors import WritegateError
from writegate.approval.models import Identity
from writegate.approval.service import Confirmation
from writegate.approval.wire import approval_request
from writegate.checkpoints.database import describe_database
from writegate.demo.model import demo_chat_model, describe_demo_model
from writegate.demo.prompt import DEMO_PROMPT
from writegate.demo.provider import SimulatedProvider
from writegate.demo.runtime import DemoRuntime, open_demo
from writegate.demo.seed import create_demo_order, seed_demo
from writegate.graph.build import build_graph
from writegate.surfaces.cli.common import console, database_url, err_console
from writegate.surfaces.cli.render import (
    audit_table,
    error_panel,
    preview_table,
    print_messages,
    receipt_panel,
    reported_errors,
)
from writegate.surfaces.cli.terminal import markup_safe

TENANT = "tenant_hz"
USER = Identity("user_42", TENANT)
REQUEST = "Please refund {order_id} because the item arrived broken"
PROTOCOL_REFUND = {"amount_minor": 1000, "currency": "USD", "reason": "shipping fee refund"}
REPLAYERS = (
    ("user_7 presents user_42's token", Identity("user_7", TENANT)),
    ("user_42's token presented in tenant_sh", Identity("user_42", "tenant_sh")),
)


class DemoFailed(Exception):
    """Something the demo claims turned out false: say so and exit non-zero."""


def run_demo() -> None:
    """The walkthrough, on the database `writegate` resolves."""
    url = database_url()
    console.print(f"[bold]database[/bold] {describe_database(url)}")
    console.print(f"[bold]model[/bold]    {describe_demo_model()}")
    with reported_errors(err_console), console.status("Preparing the database and demo data"):
        runtime = open_demo(url)
        with runtime.pool.connection() as conn:
            seed_demo(conn)
            # this run's own orders: every run starts from ¥199.00 refundable
            orders = (create_demo_order(conn, USER.user_id, "CNY", 19900),
                      create_demo_order(conn, USER.user_id, "USD", 4500))  # fmt: skip
    thread = f"demo-{uuid.uuid4().hex[:12]}"
    try:
        with reported_errors(err_console):
            _graph_part(runtime, thread, orders[0])
            _protocol_part(runtime, thread, orders)
    except DemoFailed as exc:
        console.print(f"[bold red]demo failed:[/bold red] {markup_safe(exc)}")
        raise typer.Exit(1) from exc
    finally:
        runtime.close()


def _step(title: str) -> None:
    console.rule(f"[bold]{title}")


def _refunds(runtime: DemoRuntime, order_id: str) -> int:
    provider = runtime.provider
    if not isinstance(provider, SimulatedProvider):
        raise DemoFailed("the demo counts refunds in the simulated provider only")
    return provider.count_refunds(order_id)


def _expect_refunds(runtime: DemoRuntime, order_id: str, expected: int) -> None:
    seen = _refunds(runtime, order_id)
    if seen != expected:
        raise DemoFailed(f"the provider saw {seen} refund(s) for {order_id}, expected {expected}")
    console.print(f"[dim]provider refunds for {order_id}: {seen}[/dim]")


def _graph_part(runtime: DemoRuntime, thread: str, order: str) -> None:
    graph = build_graph(
        runtime,
        model=demo_chat_model(runtime.registry.openai_tools()),
        checkpointer=runtime.checkpointer,
        system_prompt=DEMO_PROMPT,
    )
    config: Any = {"configurable": {"thread_id": thread, "user_id": USER.user_id,
                                    "tenant_id": TENANT}}  # fmt: skip
    _step(f"1. user_42 asks for a refund (thread {thread})")
    out = graph.invoke({"messages": [HumanMessage(REQUEST.format(order_id=order))]}, config)
    print_messages(console, out["messages"])
    pending = [
        i for i in out.get("__interrupt__", []) if i.value.get("operation") == "refund_order"
    ]
    if not pending:
        raise DemoFailed("the model did not propose a refund, so there is nothing to confirm")
    request = pending[0]
    _step("2. the preview the person sees (nothing has run yet)")
    console.print(preview_table(request.value))
    _expect_refunds(runtime, order, 0)

    _step('3. the person types "yes": free text is not a confirmation')
    out = graph.invoke(Command(resume={request.id: "yes"}), config)
    asked_again = [i for i in out.get("__interrupt__", []) if i.value.get("error")]
    if not asked_again:
        raise DemoFailed('a free-text "yes" was not refused')
    console.print(error_panel(asked_again[0].value["error"], title="the question stands"))
    _expect_refunds(runtime, order, 0)

    _step("4. the person clicks confirm: the structured resume event")
    answer = {"action": "confirm", "proposal_id": request.value["proposal_id"]}
    console.print(f"[dim]Command(resume={{interrupt_id: {answer}}})[/dim]")
    before = len(out["messages"])
    out = graph.invoke(Command(resume={asked_again[0].id: answer}), config)
    print_messages(console, out["messages"][before:])
    _expect_refunds(runtime, order, 1)

    _step("5. the same confirm again (a double click)")
    before = len(out["messages"])
    out = graph.invoke(Command(resume={asked_again[0].id: answer}), config)
    added = len(out["messages"]) - before
    try:
        runtime.service.decide(USER, Confirm(action="confirm", proposal_id=answer["proposal_id"]))
        raise DemoFailed("the ledger accepted a second confirmation of an executed proposal")
    except WritegateError as exc:
        console.print(f"graph: {added} new message(s); ledger answers [bold]{exc.code}[/bold]")
    _expect_refunds(runtime, order, 1)
    console.print(audit_table(runtime.store.audit_rows(TENANT, thread_id=thread),
                              title=f"audit rows for thread {thread}"))  # fmt: skip


def _protocol_part(runtime: DemoRuntime, thread: str, orders: tuple[str, str]) -> None:
    first_order, protocol_order = orders
    _step(f"6. protocol level: user_42 proposes and confirms a refund of {protocol_order}")
    service, executor = runtime.service, runtime.executor
    args = {"order_id": protocol_order, **PROTOCOL_REFUND}
    proposal = service.propose(USER, thread_id=f"{thread}-protocol", tool_call_id="replay-demo",
                               tool_name="refund_order", raw_args=args)  # fmt: skip
    console.print(preview_table(approval_request(proposal)))
    confirmed = service.decide(USER, Confirm(action="confirm", proposal_id=proposal.proposal_id))
    assert isinstance(confirmed, Confirmation)
    token = confirmed.token
    console.print(f"token issued to user_42: {token[:10]}… (shown once; the ledger keeps a hash)")
    refused: list[str] = []

    def present(label: str, identity: Identity) -> None:
        try:
            receipt = executor.execute(identity, token, proposal_id=proposal.proposal_id,
                                       operation="refund_order")  # fmt: skip
        except WritegateError as exc:
            refused.append(exc.code)
            console.print(f"{label}: refused with [bold red]{exc.code}[/bold red]")
            if exc.details.get("receipt"):
                console.print(receipt_panel(exc.details["receipt"], title="the first receipt"))
            return
        console.print(f"{label}: executed")
        console.print(receipt_panel(receipt.to_dict()))

    for label, identity in REPLAYERS:
        present(label, identity)
    _expect_refunds(runtime, protocol_order, 0)
    present("user_42 presents the token", USER)
    _expect_refunds(runtime, protocol_order, 1)
    present("user_42 presents the same token again", USER)
    present("user_7 presents it after the success", REPLAYERS[0][1])
    if refused != ["subject_mismatch", "tenant_mismatch", "already_consumed", "subject_mismatch"]:
        raise DemoFailed(f"unexpected refusals: {refused}")
    rows = [*runtime.store.audit_rows(TENANT, proposal_id=proposal.proposal_id),
            *runtime.store.audit_rows("tenant_sh", proposal_id=proposal.proposal_id)]  # fmt: skip
    console.print(audit_table(rows, title=f"audit rows for {proposal.proposal_id}"))

    _step("7. what reached the provider")
    first, second = _refunds(runtime, first_order), _refunds(runtime, protocol_order)
    if (first, second) != (1, 1):
        raise DemoFailed(
            f"provider saw {first} refund(s) for {first_order}, {second} for {protocol_order}"
        )
    console.print(
        f"[bold green]provider saw exactly 1 refund for {first_order}[/bold green] (the "
        "graph's confirmed proposal; the free-text yes and the double confirm added 0)"
    )
    console.print(
        f"[bold green]provider saw exactly 1 refund for {protocol_order}[/bold green] (the "
        f"protocol-level proposal; {len(refused)} replays refused, 0 extra refunds)"
    )
