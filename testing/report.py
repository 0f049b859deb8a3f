"""The kit's scenarios by name, and the report of one run over a tool."""

from __future__ import annotations

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


class Outcome(StrEnum):
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
    scenario: Scenario
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

    def result(self, scenario: Scenario | str) -> ScenarioResult:
        wanted = Scenario(scenario)
        return next(result for result in self.results if result.scenario is wanted)

    def assert_ok(self) -> None:
        if not self.ok:
            raise AssertionError(str(self))

    def __str__(self) -> str:
        verdict = "conforms" if self.ok else f"{len(self.failures)} scenario(s) failed"
        lines = [f"writegate conformance of {self.tool!r}: {verdict}"]
        return "\n".join(lines + ["  " + result.line() for result in self.results])
