"""Scenarios up to the write: nothing before a confirm, one effect for many confirms,
no replay by a stranger, and an edit that replaces what was confirmed.

Each takes the harness, raises `Violation` with what went wrong, and returns the
figures it counted, each named for what it counts (docs/testing.md lists them).
"""

from __future__ import annotations

import json
import secrets
import threading
from functools import partial
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from langgraph.types import Command

from writegate.approval.decisions import Confirm, Edit
from writegate.approval.errors import WritegateError
from writegate.approval.execution import AwaitingSecond
from writegate.approval.models import Proposal, Receipt
from writegate.testing.harness import Harness, refusal
from writegate.testing.recorder import Call
from writegate.testing.report import Violation, expect

# What the losers of a confirm race may be told: never a second run.
RACE_ANSWERS = {"already_consumed", "in_progress", "token_replaced", "token_unknown"}
# A stranger with the owner's proposal id or token learns nothing and runs nothing.
STRANGER_ANSWERS = {"not_found", "subject_mismatch", "tenant_mismatch", "token_unknown"}
# The confirmation of a proposal that an edit replaced.
SUPERSEDED_ANSWERS = {"revoked", "proposal_superseded", "token_unknown", "proposal_not_pending"}


def count_effects(h: Harness, before: int, wanted: int, when: str) -> int:
    seen = h.effects() - before
    if seen != wanted and wanted == 1 and seen == 0:
        raise Violation(
            f"{when}: effects() counted no effect; it must count what the tool does "
            "(rows written, calls received downstream), or every 'nothing happened' "
            "check proves nothing"
        )
    expect(seen == wanted, f"{when}: {seen} effect(s), expected {wanted}")
    return seen


def _last_answer(out: dict[str, Any]) -> dict[str, Any]:
    messages = [m for m in out.get("messages", []) if isinstance(m, ToolMessage)]
    expect(bool(messages), f"the tool node answered nothing: {out!r}")
    body = json.loads(str(messages[-1].content))
    assert isinstance(body, dict)
    return body


def nothing_before_confirm(h: Harness) -> dict[str, Any]:
    """Propose through `wg.tool_node()`: it asks and runs nothing; the confirm runs it
    once; resuming the checkpoint that asked again runs nothing more."""
    args, graph, config = h.make_args(), h.graph(), h.run_config()
    call = {"name": h.tool.name, "args": args, "id": f"call_{secrets.token_hex(6)}",
            "type": "tool_call"}  # fmt: skip
    before, mark = h.effects(), h.tool.mark()
    out = graph.invoke({"messages": [AIMessage("", tool_calls=[call])]}, config)
    asked = out.get("__interrupt__", [])
    if len(asked) != 1:
        raise Violation(f"the tool call did not ask a person first: {_last_answer(out)}")
    count_effects(h, before, 0, "after the proposal, before any confirm")
    ran = [c.kind for c in h.tool.since(mark)]
    expect(not ran, f"before any confirm writegate already called the tool: {ran}")
    proposal = h.service.get_proposal(h.identity, asked[0].value["proposal_id"])
    answer = h.confirm_decision(proposal).model_dump(exclude_none=True)
    waiting = graph.get_state(config).config  # the checkpoint that asks the question
    receipt = _last_answer(graph.invoke(Command(resume=answer), config))
    expect(receipt.get("status") == "succeeded", f"the confirmed write did not run: {receipt}")
    count_effects(h, before, 1, "after one confirm")
    again = _last_answer(graph.invoke(Command(resume=answer), waiting))
    expect(
        again.get("execution_id") == receipt["execution_id"],
        f"resuming the old checkpoint did not report the first receipt: {again}",
    )
    effects = count_effects(h, before, 1, "after resuming the checkpoint that asked, again")
    return {"effects": effects, "interrupts": len(asked)}


def concurrent_confirms(h: Harness) -> dict[str, Any]:
    """N people (or double clicks) confirm and execute one proposal at once, each on
    its own thread and connection: one run, one effect, the same receipt."""
    proposal = h.propose(h.make_args())
    decision = h.confirm_decision(proposal)
    before, mark = h.effects(), h.tool.mark()
    start = threading.Barrier(h.concurrency)
    answers: list[Receipt | AwaitingSecond | BaseException] = []
    lock = threading.Lock()

    def confirm_and_execute() -> None:
        start.wait()
        try:
            answer: Receipt | AwaitingSecond | BaseException = h.executor.confirm(
                h.identity, decision, h.tool.name
            )
        except BaseException as exc:
            answer = exc
        with lock:
            answers.append(answer)

    threads = [threading.Thread(target=confirm_and_execute) for _ in range(h.concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    receipts = [a for a in answers if isinstance(a, Receipt)]
    odd = [a for a in answers if isinstance(a, BaseException) and not _race_answer(a)]
    expect(not odd, f"a concurrent confirm failed unexpectedly: {odd[0]!r}" if odd else "")
    expect(len(receipts) == 1, f"{len(receipts)} of {h.concurrency} confirms ran the write")
    effects = count_effects(h, before, 1, f"after {h.concurrency} concurrent confirms")
    calls = h.tool.since(mark)
    keys = {c.request_key for c in calls}
    expect(keys == {receipts[0].request_key}, f"the tool saw request keys {sorted(keys)}")
    sent = [c.kind for c in calls]
    expect(
        len(sent) == len(set(sent)),
        f"one confirmed operation reached the tool {len(sent)} times: {sent}",
    )
    return {
        "confirms": h.concurrency,
        "receipts": len(receipts),
        "effects": effects,
        **kinds_of(calls),
        "request_keys": len(keys),
    }


def kinds_of(calls: list[Call]) -> dict[str, int]:
    """What writegate handed the tool, by kind: its step in the confirming transaction
    (validate again and `prepare`, or the local write itself), its function's call
    downstream, and its lookup."""
    sent = [call.kind for call in calls]
    return {
        "in_transaction": sent.count("apply"),
        "downstream_calls": sent.count("downstream"),
        "lookups": sent.count("lookup"),
    }


def _race_answer(exc: BaseException) -> bool:
    return isinstance(exc, WritegateError) and exc.code in RACE_ANSWERS


def _refused(action: Any, allowed: set[str], who: str, what: str) -> str:
    try:
        result = action()
    except WritegateError as exc:
        expect(exc.code in allowed, f"{who} {what}: refused as {refusal(exc)}, expected one of "
               f"{sorted(allowed)}")  # fmt: skip
        return exc.code
    raise Violation(f"{who} {what} and was not refused: {result!r}")


def stranger_replay(h: Harness) -> dict[str, Any]:
    """Another user, or the same user id in another tenant, replays the confirm and
    the token, before and after the owner's run: refused each time, nothing changes."""
    proposal = h.propose(h.make_args())
    token = h.confirm(proposal).token
    before, mark, refusals = h.effects(), h.tool.mark(), 0

    def replays(stage: str) -> None:
        nonlocal refusals
        for who, stranger in h.strangers.items():
            pid = proposal.proposal_id
            attempts = {
                "confirmed the proposal": partial(
                    h.service.decide, stranger, Confirm(action="confirm", proposal_id=pid)
                ),
                "executed the owner's token": partial(h.executor.execute, stranger, token),
                "confirmed and executed the proposal": partial(
                    h.executor.confirm, stranger, Confirm(action="confirm", proposal_id=pid)
                ),
            }
            for what, attempt in attempts.items():
                _refused(attempt, STRANGER_ANSWERS, who, f"{what} {stage}")
            refusals += 3

    replays("before the owner ran it")
    count_effects(h, before, 0, "after strangers replayed the confirmation")
    ran = [c.kind for c in h.tool.since(mark)]
    expect(not ran, f"a stranger's replay reached the tool: {ran}")
    receipt = h.execute(token)  # the owner's token still works: nothing was consumed
    expect(receipt.status == "succeeded", f"the owner's run did not succeed: {receipt}")
    replays("after the owner ran it")
    own = _refused(lambda: h.execute(token), {"already_consumed"}, "the owner", "replayed")
    effects = count_effects(h, before, 1, "after the owner's run and every replay")
    return {"stranger_refusals": refusals, "owner_replay_refused_as": own, "effects": effects}


def edit_supersedes(h: Harness) -> dict[str, Any]:
    """An edit after the confirm is a new proposal with a new preview and digest; the
    old confirmation can no longer run, and the new one runs the edited arguments."""
    if h.make_edited is None:
        raise NotImplementedError("no edited arguments given (edited=...)")
    args = h.make_args()
    proposal = h.propose(args)
    old_token = h.confirm(proposal).token
    before, mark = h.effects(), h.tool.mark()
    try:
        edited = h.service.decide(
            h.identity,
            Edit(action="edit", proposal_id=proposal.proposal_id, args=h.make_edited(args)),
        )
    except WritegateError as exc:
        raise Violation(f"the edited arguments were refused: {refusal(exc)}") from exc
    expect(isinstance(edited, Proposal), f"an edit gave {edited!r}, not a new proposal")
    assert isinstance(edited, Proposal)
    expect(edited.proposal_id != proposal.proposal_id, "the edit kept the old proposal: "
           "give edited arguments that differ from the original")  # fmt: skip
    expect(edited.args_digest != proposal.args_digest, "the edit kept the old args digest")
    expect(
        edited.preview["fields"] != proposal.preview["fields"],
        "the edited proposal shows the same preview fields: the person cannot see the edit",
    )
    old = Confirm(action="confirm", proposal_id=proposal.proposal_id)
    refused = [
        _refused(lambda: h.execute(old_token), SUPERSEDED_ANSWERS, "the old token", "executed"),
        _refused(lambda: h.service.decide(h.identity, old), SUPERSEDED_ANSWERS,
                 "the old proposal", "was confirmed again"),
    ]  # fmt: skip
    count_effects(h, before, 0, "after the edit, before its confirm")
    expect(not h.tool.since(mark), "the superseded proposal reached the tool")
    receipt = h.execute(h.confirm(edited).token)
    expect(receipt.status == "succeeded", f"the edited proposal did not run: {receipt}")
    effects = count_effects(h, before, 1, "after confirming the edit")
    seen = [c.args for c in h.tool.since(mark) if c.kind != "lookup"]
    expect(
        all(a == edited.args for a in seen),
        f"the tool ran with {seen}, not the edited arguments {edited.args}",
    )
    return {"superseded_refusals": len(refused), "effects": effects}
