"""The kit's scenarios by name, and the report of one run over a tool."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Scenario(StrEnum):
    """One invariant the kit checks, each a short run against the real database."""

    NOTHING_BEFORE_CONFIRM = "nothing_before_confirm"
    CONCURRENT_CONFIRMS = "concurrent_confirms"
    STRANGER_REPLAY = "stranger_replay"
    EDIT_SUPERSEDES = "edit_supersedes"
    LOST_ANSWER_IS_UNKNOWN = "lost_answer_is_unknown"
    RETRIES_KEEP_THE_KEY = "retries_keep_the_key"


class ReadScenario(StrEnum):
    """One invariant `check_read_tool` checks over a read tool."""

    RUNS_AT_ONCE = "runs_at_once"
    AUDITED_WITH_IDENTITY = "audited_with_identity"
    NO_WRITE_PATH = "no_write_path"
    IDENTITY_FROM_HOST = "identity_from_host"


AnyScenario = Scenario | ReadScenario


def scenario_named(name: AnyScenario | str) -> AnyScenario:
    """A write or read scenario by its name."""
    if isinstance(name, Scenario | ReadScenario):
        return name
    return Scenario(name) if name in {s.value for s in Scenario} else ReadScenario(name)


class Outcome(StrEnum):
    """How a scenario ended."""

    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"


class Violation(AssertionError):
    """A scenario saw the tool (or writegate) break an invariant; the message says how."""


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise Violation(message)


@dataclass(frozen=True)
class ScenarioResult:
    scenario: AnyScenario
    outcome: Outcome
    message: str = ""
    # What the scenario counted: effects, downstream calls, distinct request keys, ...
    figures: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.outcome is not Outcome.FAILED

    def line(self) -> str:
        figures = ", ".join(f"{k}={v}" for k, v in self.figures.items())
        text = f"{self.outcome.value:7} {self.scenario.value} ({self.seconds:.2f} s)"
        text += f" [{figures}]" if figures else ""
        return text + (f"\n        {self.message}" if self.message else "")


@dataclass(frozen=True)
class Report:
    """Every scenario's result for one tool; `assert_ok()` fails a test with all of them."""

    tool: str
    results: list[ScenarioResult]

    @property
    def ok(self) -> bool:
        return all(result.ok for result in self.results)

    @property
    def failures(self) -> list[ScenarioResult]:
        return [result for result in self.results if not result.ok]

    def result(self, scenario: AnyScenario | str) -> ScenarioResult:
        wanted = scenario_named(scenario)
        return next(result for result in self.results if result.scenario is wanted)

    def assert_ok(self) -> None:
        if not self.ok:
            raise AssertionError(str(self))

    def __str__(self) -> str:
        verdict = "conforms" if self.ok else f"{len(self.failures)} scenario(s) failed"
        lines = [f"writegate conformance of {self.tool!r}: {verdict}"]
        return "\n".join(lines + ["  " + result.line() for result in self.results])


def run_scenario(scenario: AnyScenario, run: Callable[[], dict[str, Any]]) -> ScenarioResult:
    """Run one scenario: passed with its figures, skipped (`NotImplementedError`), or
    failed with the violation, or with whatever broke in the tool or the database."""
    started = time.perf_counter()

    def result(outcome: Outcome, message: str = "", **figures: Any) -> ScenarioResult:
        return ScenarioResult(scenario, outcome, message, figures, time.perf_counter() - started)

    try:
        figures = run()
    except NotImplementedError as exc:
        return result(Outcome.SKIPPED, str(exc))
    except Violation as exc:
        return result(Outcome.FAILED, str(exc))
    except Exception as exc:  # the tool or the database broke: report it, keep going
        return result(Outcome.FAILED, f"unexpected {type(exc).__name__}: {exc}")
    return result(Outcome.PASSED, "", **figures)
