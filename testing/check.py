"""`check_write_tool`: run every scenario over one write tool on a real PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from writegate.approval.models import Identity
from writegate.approval.service import Policy
from writegate.checkpoints.ops import ledger_stats
from writegate.runtime.writegate import Writegate, spec_of
from writegate.testing.harness import KIT_RETRY, Harness
from writegate.testing.recorder import FaultHook, Recorder
from writegate.testing.report import Outcome, Report, Scenario, ScenarioResult, run_scenario
from writegate.testing.scenarios_gate import (
    concurrent_confirms,
    edit_supersedes,
    nothing_before_confirm,
    stranger_replay,
)
from writegate.testing.scenarios_outcomes import lost_answer_is_unknown, retries_keep_the_key

Args = dict[str, Any] | Callable[[], dict[str, Any]]
Edited = dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]]

RUNS: dict[Scenario, Callable[[Harness], dict[str, Any]]] = {
    Scenario.NOTHING_BEFORE_CONFIRM: nothing_before_confirm,
    Scenario.CONCURRENT_CONFIRMS: concurrent_confirms,
    Scenario.STRANGER_REPLAY: stranger_replay,
    Scenario.EDIT_SUPERSEDES: edit_supersedes,
    Scenario.LOST_ANSWER_IS_UNKNOWN: lost_answer_is_unknown,
    Scenario.RETRIES_KEEP_THE_KEY: retries_keep_the_key,
}
# These run the reconciler, which settles every due execution of the database.
RECONCILING = {Scenario.LOST_ANSWER_IS_UNKNOWN, Scenario.RETRIES_KEEP_THE_KEY}
DEFAULT_IDENTITY = Identity("user_conformance", "tenant_conformance")


def check_write_tool(
    tool: Any,
    *,
    args: Args,
    effects: Callable[[], int],
    database_url: str,
    edited: Edited | None = None,
    faults: FaultHook | None = None,
    identity: Identity = DEFAULT_IDENTITY,
    policy: Policy | None = None,
    scenarios: Iterable[Scenario | str] | None = None,
    concurrency: int = 16,
) -> Report:
    """Check writegate's invariants over `tool` against the database at `database_url`.

    - `tool`: a write tool from `@write_tool` (or any writegate ToolSpec).
    - `args`: valid arguments for `identity`, or a callable returning fresh ones; it is
      called once per scenario, so a write never depends on an earlier scenario's.
    - `effects()`: how many times the tool's effect happened so far (payments received,
      rows written); the kit compares it before and after each step.
    - `edited`: other valid arguments for the edit scenario, or a callable
      `(args) -> edited args`; without it that scenario is skipped.
    - `faults`: `faults(Fault.LOSE_ANSWER)` / `faults(Fault.TIMEOUT_BEFORE)` are context
      managers under which every downstream call times out after / before applying;
      by default the kit injects the timeout itself, around the tool's function.

    The database should be the kit's own (see `writegate.testing.throwaway_database`):
    the kit sets up writegate's tables there, and its reconciling scenarios refuse to
    run if someone else's executions are waiting for reconciliation.
    """
    recorder = Recorder(spec_of(tool))
    if not recorder.requires_approval:
        raise TypeError(f"{recorder.name} is a read tool; the kit checks write tools")
    make_args = args if callable(args) else (lambda: dict(args))
    make_edited = edited if callable(edited) or edited is None else (lambda _: dict(edited))
    wanted = [Scenario(s) for s in scenarios] if scenarios is not None else list(Scenario)
    with Writegate.open(
        database_url,
        tools=[recorder],
        policy=policy,
        max_connections=concurrency + 4,
        retry=KIT_RETRY,
    ) as wg:
        harness = Harness(
            wg, recorder, identity, make_args, make_edited, effects,
            faults or recorder.inject, concurrency,
        )  # fmt: skip
        busy = ledger_stats(wg.runtime.pool)["backlog"]["size"]
        results = [_run(harness, scenario, busy) for scenario in wanted]
    return Report(recorder.name, results)


def _run(harness: Harness, scenario: Scenario, busy: int) -> ScenarioResult:
    if scenario in RECONCILING and busy:
        return ScenarioResult(
            scenario,
            Outcome.FAILED,
            f"{busy} execution(s) of someone else wait for reconciliation in this "
            "database; give the kit a database of its own",
        )

    def run() -> dict[str, Any]:
        if scenario in RECONCILING:
            harness.drain()  # what an earlier failed scenario left unsettled is not ours
        return RUNS[scenario](harness)

    return run_scenario(scenario, run)
