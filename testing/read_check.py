"""`check_read_tool`: a read tool runs at once, is audited, and reads for the host's
identity only, on a real PostgreSQL.

Each `ReadScenario` sends tool calls through `wg.tool_node()` in the smallest graph
(the same read path as `wg.middleware()` and `wg.build_agent()`), or straight to the
service, and looks at what the tool was handed (its recorded reads, each with the
identity it ran for) and at writegate's tables (proposals, audit rows).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage

from writegate.approval.errors import WritegateError
from writegate.approval.models import Identity
from writegate.runtime.writegate import Writegate, spec_of
from writegate.testing.check import DEFAULT_IDENTITY, Args
from writegate.testing.harness import run_config, smallest_graph
from writegate.testing.recorder import Recorder
from writegate.testing.report import ReadScenario, Report, Violation, expect, run_scenario

# Who acts is the host's to say: a read tool whose arguments name the user or tenant
# lets the model choose whose data it reads.
IDENTITY_ARGUMENTS = ("user_id", "tenant_id")
PROPOSALS_SQL = "SELECT count(*) AS n FROM writegate.proposals WHERE operation = %s"
AUDIT_SQL = """
SELECT user_id, tenant_id, event, status, error_code FROM writegate.audit
WHERE thread_id = %s AND tool_name = %s ORDER BY audit_id
"""


@dataclass
class ReadHarness:
    wg: Writegate
    tool: Recorder
    identity: Identity
    make_args: Callable[[], dict[str, Any]]

    @property
    def stranger(self) -> Identity:
        me = self.identity
        return Identity(f"{me.user_id}_stranger", f"{me.tenant_id}_stranger")

    def call(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"name": self.tool.name, "args": args, "id": f"call_{secrets.token_hex(6)}",
                "type": "tool_call"}  # fmt: skip

    def run(
        self, calls: list[dict[str, Any]], config: dict[str, Any], context: Any = None
    ) -> dict[str, Any]:
        state = {"messages": [AIMessage("", tool_calls=calls)]}
        out: dict[str, Any] = smallest_graph(self.wg).invoke(state, config, context=context)
        return out

    def reads(self, mark: int) -> list[Identity | None]:
        return [call.identity for call in self.tool.since(mark, "read")]

    def proposals(self) -> int:
        with self.wg.runtime.pool.connection() as conn:
            row = conn.execute(PROPOSALS_SQL, (self.tool.name,)).fetchone()
        return int(row["n"]) if row else 0

    def audit(self, config: dict[str, Any]) -> list[dict[str, Any]]:
        thread = config["configurable"]["thread_id"]
        with self.wg.runtime.pool.connection() as conn:
            return [dict(row) for row in conn.execute(AUDIT_SQL, (thread, self.tool.name))]


def answers(out: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(status, JSON body) of each ToolMessage the run answered with."""
    found = [m for m in out.get("messages", []) if isinstance(m, ToolMessage)]
    expect(bool(found), f"the tool node answered nothing: {out!r}")
    return [(m.status, json.loads(str(m.content))) for m in found]


def same_person(seen: Identity | None, expected: Identity) -> bool:
    return seen is not None and (seen.user_id, seen.tenant_id) == (
        expected.user_id,
        expected.tenant_id,
    )


def runs_at_once(h: ReadHarness) -> dict[str, Any]:
    """Through `wg.tool_node()`: no question, no proposal; the tool runs once and its
    answer reaches the model."""
    before, mark = h.proposals(), h.tool.mark()
    out = h.run([h.call(h.make_args())], run_config(h.identity))
    asked = out.get("__interrupt__")
    expect(not asked, f"a read asked a person first: {asked}")
    ((status, body),) = answers(out)
    expect(status != "error", f"valid arguments were refused: {body}")
    expect("status" in body, f"the answer has no `status`: {body}")
    ran = h.reads(mark)
    expect(len(ran) == 1, f"one call ran the tool {len(ran)} times")
    expect(h.proposals() == before, "a read left a proposal behind")
    return {"tool_runs": len(ran), "proposals": h.proposals() - before}


def audited_with_identity(h: ReadHarness) -> dict[str, Any]:
    """Two valid calls and one with an unknown argument: three audit rows, all of the
    run's user and tenant, the refused one with its error code."""
    args, config = h.make_args(), run_config(h.identity)
    calls = [h.call(args), h.call(args), h.call({**args, "kit_unknown_argument": 1})]
    h.run(calls, config)
    rows = h.audit(config)
    expect(len(rows) == len(calls), f"{len(calls)} calls left {len(rows)} audit rows: {rows}")
    me = (h.identity.user_id, h.identity.tenant_id)
    strangers = [row for row in rows if (row["user_id"], row["tenant_id"]) != me]
    expect(not strangers, f"audit rows not of the run's user {me}: {strangers}")
    expect({row["event"] for row in rows} == {"read"}, f"not audited as reads: {rows}")
    outcomes = sorted((row["status"], row["error_code"]) for row in rows)
    expect(
        outcomes[-2:] == [("succeeded", None)] * 2 and outcomes[0][1] == "validation_failed",
        f"two successes and one validation_failed expected in the audit, got {outcomes}",
    )
    return {"tool_calls": len(calls), "audit_rows": len(rows)}


def no_write_path(h: ReadHarness) -> dict[str, Any]:
    """Proposing the read as a write is refused: nothing stored, the tool not run."""
    before, mark = h.proposals(), h.tool.mark()
    try:
        proposal = h.wg.runtime.service.propose(
            h.identity,
            thread_id=f"kit_{secrets.token_hex(6)}",
            tool_call_id=f"call_{secrets.token_hex(6)}",
            tool_name=h.tool.name,
            raw_args=h.make_args(),
        )
    except WritegateError as exc:
        code = exc.code
    else:
        raise Violation(f"the read was proposed as a write: {proposal.proposal_id}")
    expect(code == "validation_failed", f"the proposal was refused as {code}")
    expect(h.proposals() == before, "a refused proposal left a row")
    expect(not h.tool.since(mark), "proposing the read ran the tool")
    return {"refused_as": code}


def _refused_before_the_tool(h: ReadHarness, config: dict[str, Any], context: Any, why: str) -> str:
    mark = h.tool.mark()
    try:
        out = h.run([h.call(h.make_args())], config, context)
    except Exception as exc:  # the run fails: who acts is not known
        refused = type(exc).__name__
    else:
        raise Violation(f"{why}: the run went on and answered {answers(out)}")
    expect(not h.tool.since(mark), f"{why}: the tool ran anyway")
    return refused


def identity_from_host(h: ReadHarness) -> dict[str, Any]:
    """Who acts comes from the run config or the run context: arguments naming a user
    are refused, the tool is handed the run's identity, and a run naming nobody, or two
    different users, fails before the tool runs."""
    properties = set(h.tool.json_schema().get("properties", {}))
    named = sorted(properties & set(IDENTITY_ARGUMENTS))
    expect(
        not named,
        f"the model sets {named}: take who acts from writegate (a keyword-only "
        "`identity`) and name an argument about someone else differently",
    )
    me, stranger, mark = h.identity, h.stranger, h.tool.mark()
    forged = {**h.make_args(), "user_id": stranger.user_id, "tenant_id": stranger.tenant_id}
    ((_, body),) = answers(h.run([h.call(forged)], run_config(me)))
    expect(body.get("code") == "validation_failed", f"arguments naming a user gave {body}")
    expect(not h.tool.since(mark), "arguments naming a user still ran the tool")

    only_context = run_config(None)
    who = {"user_id": me.user_id, "tenant_id": me.tenant_id}
    ((status, body),) = answers(h.run([h.call(h.make_args())], only_context, who))
    expect(status != "error", f"with the identity in the run context the read gave {body}")
    seen = h.reads(mark)
    expect(len(seen) == 1 and same_person(seen[0], me), f"the tool was handed {seen}")
    audited = [(row["user_id"], row["tenant_id"]) for row in h.audit(only_context)]
    expect(audited == [(me.user_id, me.tenant_id)], f"audited as {audited}")

    mark = h.tool.mark()  # the owner's arguments, a stranger's run: the stranger's read
    answers(h.run([h.call(h.make_args())], run_config(stranger)))
    seen = h.reads(mark)
    expect(len(seen) == 1 and same_person(seen[0], stranger), f"the tool was handed {seen}")

    other = {"user_id": stranger.user_id, "tenant_id": me.tenant_id}
    clash = _refused_before_the_tool(h, run_config(me), other, "config and context disagree")
    nobody = _refused_before_the_tool(h, run_config(None), None, "no identity at all")
    return {"disagreeing_refused_as": clash, "nobody_refused_as": nobody}


RUNS: dict[ReadScenario, Callable[[ReadHarness], dict[str, Any]]] = {
    ReadScenario.RUNS_AT_ONCE: runs_at_once,
    ReadScenario.AUDITED_WITH_IDENTITY: audited_with_identity,
    ReadScenario.NO_WRITE_PATH: no_write_path,
    ReadScenario.IDENTITY_FROM_HOST: identity_from_host,
}


def check_read_tool(
    tool: Any,
    *,
    args: Args,
    database_url: str,
    identity: Identity = DEFAULT_IDENTITY,
    scenarios: Iterable[ReadScenario | str] | None = None,
) -> Report:
    """Check writegate's invariants for a read tool against the database at `database_url`.

    - `tool`: a read tool from `@read_tool` / `read_tool(tool)`.
    - `args`: valid arguments for `identity`, or a callable returning fresh ones (called
      once or more per scenario).
    """
    recorder = Recorder(spec_of(tool))
    if recorder.requires_approval:
        raise TypeError(f"{recorder.name} is a write tool; check it with check_write_tool")
    make_args = args if callable(args) else (lambda: dict(args))
    wanted = [ReadScenario(s) for s in scenarios] if scenarios is not None else list(ReadScenario)
    with Writegate.open(database_url, tools=[recorder]) as wg:
        harness = ReadHarness(wg, recorder, identity, make_args)
        results = [run_scenario(s, partial(RUNS[s], harness)) for s in wanted]
    return Report(recorder.name, results)
