"""Scenarios after the write was sent: a lost answer is `unknown`, settled by the
tool's lookup, sent again to a tool that declared `dedupes_by_key`, or handed to a
person, never re-sent blindly; and every retry, by the executor or the reconciler,
carries the operation's one request key.

Each way of settling also shows that the request key reaches the downstream: the
lookup finds the write by its key, or the executor's and reconciler's second sends
apply nothing more. A tool with neither is never sent twice by writegate, so the kit
sends the operation a second time itself, with its key, and checks that nothing more
applies; without that, a tool that drops its key would pass.

The downstream's faults come from the caller's hook, or from the kit's own injection
at the tool's boundary (see `recorder.py`).
"""

from __future__ import annotations

from typing import Any

from writegate.approval.downstream import Attempt
from writegate.approval.errors import WritegateError
from writegate.approval.models import Proposal
from writegate.approval.reconcile import receipt_for
from writegate.approval.spec import acting_for
from writegate.testing.harness import KIT_RETRY, Harness, refusal
from writegate.testing.recorder import Fault
from writegate.testing.report import Violation, expect
from writegate.testing.scenarios_gate import count_effects

NO_DOWNSTREAM = (
    "the tool has no downstream call: its write commits with the ledger, so its "
    "outcome is never unknown"
)


def _unknown_run(h: Harness, fault: Fault) -> tuple[Proposal, str, str, str]:
    """Propose, confirm and execute while the downstream suffers `fault`; the run must
    end `outcome_unknown`. Returns the proposal, token, execution id and request key."""
    proposal = h.propose(h.make_args())
    token = h.confirm(proposal).token
    with h.lost(fault):
        try:
            receipt = h.execute(token)
        except WritegateError as exc:
            expect(
                exc.code == "outcome_unknown",
                f"a downstream timeout ({fault.value}) became {refusal(exc)}: a call that "
                "may have applied must be `outcome_unknown`, never a failure",
            )
            details = exc.details
        else:
            raise Violation(
                f"under {fault.value} the run reported {receipt.status}: the fault hook did "
                "not reach the downstream, or the tool swallowed its timeout"
            )
    return proposal, token, str(details["execution_id"]), str(details["request_key"])


def _one_key(h: Harness, mark: int, request_key: str) -> int:
    keys = {call.request_key for call in h.tool.since(mark)}
    expect(
        keys == {request_key},
        f"one operation reached the tool with {len(keys)} request keys {sorted(keys)}; "
        f"every retry and lookup must carry {request_key!r}",
    )
    return len(keys)


def _never_resent(h: Harness, mark: int, when: str) -> None:
    sent = h.tool.since(mark, "downstream")
    expect(not sent, f"{when} the write was sent again {len(sent)} time(s) without a lookup")


def _second_send_applies_nothing(h: Harness, proposal: Proposal, key: str, before: int) -> None:
    """Send the applied operation again with its key, as writegate does after a "not
    applied" answer (a 429 or 503 may follow an applied call); one effect must remain."""
    with acting_for(h.identity):
        sent = Attempt(h.tool, proposal.args, key)
    waited = KIT_RETRY.call_timeout
    expect(sent.done.wait(waited), f"the second send of {key!r} did not answer in {waited:g} s")
    # Its answer (a result, or a refusal of the repeat) is the downstream's business:
    # what must hold is that it did not apply the operation twice.
    seen = h.effects() - before
    expect(
        seen == 1,
        f"the same operation sent a second time with its request key {key!r} applied "
        f"again ({seen} effects): the tool must pass request_key downstream as its "
        "idempotency key (one operation, one request key), so that a repeat is dropped; "
        "without a lookup nothing else tells a repeat from a new write",
    )


def lost_answer_is_unknown(h: Harness) -> dict[str, Any]:
    """The downstream applies, then its answer is lost: `outcome_unknown`, one effect;
    the owner's retry sends nothing; the lookup settles it, or the reconciler sends it
    again to a tool that dedupes by key (still one effect), or a person gets it."""
    if not h.has_downstream:
        raise NotImplementedError(NO_DOWNSTREAM)
    before, mark = h.effects(), h.tool.mark()
    proposal, token, execution_id, request_key = _unknown_run(h, Fault.LOSE_ANSWER)
    applied = h.effects() - before
    expect(applied != 0, "under lose_answer nothing applied: the fault hook must let the "
           "call apply and only then lose its answer")  # fmt: skip
    expect(
        applied == 1,
        f"one operation applied {applied} times: every send carried {request_key!r}, so "
        "the tool must pass request_key downstream as its idempotency key",
    )
    attempts = len(h.tool.since(mark, "downstream"))
    after = h.tool.mark()
    try:
        h.execute(token)
    except WritegateError as exc:
        expect(exc.code == "outcome_unknown", f"the owner's retry gave {refusal(exc)}")
    _never_resent(h, after, "when the owner retried an unknown outcome")
    settled = h.reconcile(execution_id)
    if h.has_lookup:
        expect(
            settled.action == "found",
            f"the call applied and only its answer was lost, yet the lookup did not find "
            f"{request_key!r} ({settled.action}): the tool must pass request_key downstream "
            "as its idempotency key, and the lookup must ask by that key",
        )
        expect(settled.status == "succeeded", f"the lookup did not settle it: {settled}")
        receipt = receipt_for(h.service.store, h.identity, proposal.proposal_id)
        expect(receipt.status == "succeeded", f"after the lookup the receipt is {receipt}")
        _never_resent(h, after, "although the lookup found it applied,")
    elif h.dedupes_by_key:
        expect(
            settled.status == "succeeded",
            "a tool declaring dedupes_by_key is sent again with the same key by the "
            f"reconciler, which must then settle it: {settled}",
        )
        expect(
            h.effects() - before == 1,
            f"the reconciler sent {request_key!r} again and it applied again: a tool "
            "declaring dedupes_by_key must pass request_key downstream to one that drops "
            "a repeated key",
        )
    else:
        expect(settled.status == "escalated", f"without a lookup it was not escalated: {settled}")
        _never_resent(h, after, "without a lookup")
        _second_send_applies_nothing(h, proposal, request_key, before)
    effects = count_effects(h, before, 1, "after reconciliation")
    return {
        "downstream_calls": attempts,  # the executor's, with their retries
        "effects": effects,
        "settled": settled.status,
        "request_keys": _one_key(h, mark, request_key),
    }


def retries_keep_the_key(h: Harness) -> dict[str, Any]:
    """The downstream times out before applying on every attempt: the executor's
    retries, the lookup and the reconciler's one re-send all carry the same key; the
    write applies once. Without a lookup it is re-sent only to a tool that dedupes by
    key; else nothing is re-sent: a person decides."""
    if not h.has_downstream:
        raise NotImplementedError(NO_DOWNSTREAM)
    before, mark = h.effects(), h.tool.mark()
    _, _, execution_id, request_key = _unknown_run(h, Fault.TIMEOUT_BEFORE)
    count_effects(h, before, 0, "after timeouts before anything applied")
    attempts, after = len(h.tool.since(mark, "downstream")), h.tool.mark()
    settled = h.reconcile(execution_id)
    if h.has_lookup or h.dedupes_by_key:
        expect(
            settled.action != "found",
            f"the lookup reported {request_key!r} applied, yet every attempt timed out "
            "before applying: a lookup must answer None for a key the downstream never saw",
        )
        why = "the lookup found nothing" if h.has_lookup else "it dedupes by key"
        expect(
            settled.status == "succeeded",
            f"{why}, yet the write was not sent again and settled: {settled}",
        )
        count_effects(h, before, 1, "after the reconciler sent it again")
        expect(bool(h.tool.since(after, "downstream")), "the reconciler never sent it again")
    else:
        expect(settled.status == "escalated", f"without a lookup it was not escalated: {settled}")
        _never_resent(h, after, "without a lookup")
        count_effects(h, before, 0, "after escalation")
    return {
        "downstream_calls": attempts,  # the executor's, with their retries
        "reconciler_lookups": len(h.tool.since(after, "lookup")),
        "reconciler_resends": len(h.tool.since(after, "downstream")),
        "request_keys": _one_key(h, mark, request_key),
    }
