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

from writegate import Confirm, Identity, ProposalView, Writegate, WritegateError, describe_database
from writegate.demo.cli.kit import CommandLine
from writegate.demo.model import describe_demo_model
from writegate.demo.provider import ProviderClient, SimulatedProvider
from writegate.demo.runtime import default_provider, demo_agent, open_demo
from writegate.demo.seed import create_demo_order, seed_demo

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


def run_demo(cli: CommandLine) -> None:
    """The walkthrough, on the database `writegate` resolves."""
    url = cli.database_url()
    cli.console.print(f"[bold]database[/bold] {describe_database(url)}")
    cli.console.print(f"[bold]model[/bold]    {describe_demo_model()}")
    with (
        cli.reported_errors(cli.err_console),
        cli.console.status("Preparing the database and demo data"),
    ):
        wg = open_demo(url)
        # the provider open_demo chose: the simulator keeps its refunds in its table
        provider = default_provider(wg.runtime.pool)
        with wg.runtime.pool.connection() as conn:
            seed_demo(conn)
            # this run's own orders: every run starts from ¥199.00 refundable
            orders = (create_demo_order(conn, USER.user_id, "CNY", 19900),
                      create_demo_order(conn, USER.user_id, "USD", 4500))  # fmt: skip
    thread = f"demo-{uuid.uuid4().hex[:12]}"
    try:
        with cli.reported_errors(cli.err_console):
            _graph_part(cli, wg, provider, thread, orders[0])
            _protocol_part(cli, wg, provider, thread, orders)
    except DemoFailed as exc:
        cli.console.print(f"[bold red]demo failed:[/bold red] {cli.markup_safe(exc)}")
        raise typer.Exit(1) from exc
    finally:
        wg.close()


def _step(cli: CommandLine, title: str) -> None:
    cli.console.rule(f"[bold]{title}")


def _refunds(provider: ProviderClient, order_id: str) -> int:
    if not isinstance(provider, SimulatedProvider):
        raise DemoFailed("the demo counts refunds in the simulated provider only")
    return provider.count_refunds(order_id)


def _expect_refunds(
    cli: CommandLine, provider: ProviderClient, order_id: str, expected: int
) -> None:
    seen = _refunds(provider, order_id)
    if seen != expected:
        raise DemoFailed(f"the provider saw {seen} refund(s) for {order_id}, expected {expected}")
    cli.console.print(f"[dim]provider refunds for {order_id}: {seen}[/dim]")


def _graph_part(
    cli: CommandLine, wg: Writegate, provider: ProviderClient, thread: str, order: str
) -> None:
    graph = demo_agent(wg)
    config: Any = {"configurable": {"thread_id": thread, "user_id": USER.user_id,
                                    "tenant_id": TENANT}}  # fmt: skip
    _step(cli, f"1. user_42 asks for a refund (thread {thread})")
    out = graph.invoke({"messages": [HumanMessage(REQUEST.format(order_id=order))]}, config)
    cli.print_messages(cli.console, out["messages"])
    pending = [
        i for i in out.get("__interrupt__", []) if i.value.get("operation") == "refund_order"
    ]
    if not pending:
        raise DemoFailed("the model did not propose a refund, so there is nothing to confirm")
    request = pending[0]
    _step(cli, "2. the preview the person sees (nothing has run yet)")
    cli.console.print(cli.preview_table(request.value))
    _expect_refunds(cli, provider, order, 0)

    _step(cli, '3. the person types "yes": free text is not a confirmation')
    out = graph.invoke(Command(resume={request.id: "yes"}), config)
    asked_again = [i for i in out.get("__interrupt__", []) if i.value.get("error")]
    if not asked_again:
        raise DemoFailed('a free-text "yes" was not refused')
    cli.console.print(cli.error_panel(asked_again[0].value["error"], title="the question stands"))
    _expect_refunds(cli, provider, order, 0)

    _step(cli, "4. the person clicks confirm: the structured resume event")
    answer = {"action": "confirm", "proposal_id": request.value["proposal_id"]}
    cli.console.print(f"[dim]Command(resume={{interrupt_id: {answer}}})[/dim]")
    before = len(out["messages"])
    out = graph.invoke(Command(resume={asked_again[0].id: answer}), config)
    cli.print_messages(cli.console, out["messages"][before:])
    _expect_refunds(cli, provider, order, 1)

    _step(cli, "5. the same confirm again (a double click)")
    before = len(out["messages"])
    out = graph.invoke(Command(resume={asked_again[0].id: answer}), config)
    added = len(out["messages"]) - before
    try:
        wg.runtime.service.decide(
            USER, Confirm(action="confirm", proposal_id=answer["proposal_id"])
        )
        raise DemoFailed("the ledger accepted a second confirmation of an executed proposal")
    except WritegateError as exc:
        cli.console.print(f"graph: {added} new message(s); ledger answers [bold]{exc.code}[/bold]")
    _expect_refunds(cli, provider, order, 1)
    rows = wg.runtime.store.audit_rows(TENANT, thread_id=thread)
    cli.console.print(cli.audit_table(rows, title=f"audit rows for thread {thread}"))


def _protocol_part(
    cli: CommandLine,
    wg: Writegate,
    provider: ProviderClient,
    thread: str,
    orders: tuple[str, str],
) -> None:
    first_order, protocol_order = orders
    _step(cli, f"6. protocol level: user_42 proposes and confirms a refund of {protocol_order}")
    service, executor = wg.runtime.service, wg.runtime.executor
    args = {"order_id": protocol_order, **PROTOCOL_REFUND}
    proposal = service.propose(USER, thread_id=f"{thread}-protocol", tool_call_id="replay-demo",
                               tool_name="refund_order", raw_args=args)  # fmt: skip
    cli.console.print(cli.proposal_table(ProposalView.of(proposal)))
    confirmed = service.decide(USER, Confirm(action="confirm", proposal_id=proposal.proposal_id))
    token = getattr(confirmed, "token", None)  # a Confirmation: the token, shown once
    if not isinstance(token, str):
        raise DemoFailed(f"confirming {proposal.proposal_id} issued no token")
    cli.console.print(
        f"token issued to user_42: {token[:10]}… (shown once; the ledger keeps a hash)"
    )
    refused: list[str] = []

    def present(label: str, identity: Identity) -> None:
        try:
            receipt = executor.execute(identity, token, proposal_id=proposal.proposal_id,
                                       operation="refund_order")  # fmt: skip
        except WritegateError as exc:
            refused.append(exc.code)
            cli.console.print(f"{label}: refused with [bold red]{exc.code}[/bold red]")
            if exc.details.get("receipt"):
                cli.console.print(
                    cli.receipt_panel(exc.details["receipt"], title="the first receipt")
                )
            return
        cli.console.print(f"{label}: executed")
        cli.console.print(cli.receipt_panel(receipt.to_dict()))

    for label, identity in REPLAYERS:
        present(label, identity)
    _expect_refunds(cli, provider, protocol_order, 0)
    present("user_42 presents the token", USER)
    _expect_refunds(cli, provider, protocol_order, 1)
    present("user_42 presents the same token again", USER)
    present("user_7 presents it after the success", REPLAYERS[0][1])
    if refused != ["subject_mismatch", "tenant_mismatch", "already_consumed", "subject_mismatch"]:
        raise DemoFailed(f"unexpected refusals: {refused}")
    store = wg.runtime.store
    rows = [*store.audit_rows(TENANT, proposal_id=proposal.proposal_id),
            *store.audit_rows("tenant_sh", proposal_id=proposal.proposal_id)]  # fmt: skip
    cli.console.print(cli.audit_table(rows, title=f"audit rows for {proposal.proposal_id}"))

    _step(cli, "7. what reached the provider")
    first, second = _refunds(provider, first_order), _refunds(provider, protocol_order)
    if (first, second) != (1, 1):
        raise DemoFailed(
            f"provider saw {first} refund(s) for {first_order}, {second} for {protocol_order}"
        )
    cli.console.print(
        f"[bold green]provider saw exactly 1 refund for {first_order}[/bold green] (the "
        "graph's confirmed proposal; the free-text yes and the double confirm added 0)"
    )
    cli.console.print(
        f"[bold green]provider saw exactly 1 refund for {protocol_order}[/bold green] (the "
        f"protocol-level proposal; {len(refused)} replays refused, 0 extra refunds)"
    )
