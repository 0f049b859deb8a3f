"""Fault strategies for the provider simulator: the failures a real payment API has.

A `FaultScript` is a `ProviderFaults` (see `demo/provider.py`): before and after each
refund, and before each lookup, it takes the next step of the first rule that matches
the call and acts it out:

    ok               behave
    timeout_before   stall, then fail before anything is stored (never applied)
    timeout_after    store the refund, then stall and lose the answer (applied)
    unavailable      503 before anything is stored (alias: 503)
    rate_limited     429 before anything is stored (alias: 429)
    decline          a final refusal (card closed): `execution_failed`, never retried
    apply_then_die   store the refund, then the provider dies without answering

Rules are written `[lookup:][MATCH=]STEP[*N][,STEP[*N]...]`: MATCH is a substring of
the idempotency key (an order id works: request keys name their resource), `*N`
repeats a step, a bare `*` repeats it forever; `lookup:` rules apply to lookups.
Several rules are separated by `;` in `WRITEGATE_PROVIDER_FAULTS`.

In process, a stall is nothing and a fault is an exception; the HTTP simulator
(`demo/provider_http.py`) passes `stall` and `die` so the same steps become a real
hung socket and a real dead process.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from writegate import ExecutionFailed, RateLimited, TemporarilyUnavailable, UpstreamTimeout

FAULTS_ENV = "WRITEGATE_PROVIDER_FAULTS"
STEPS = frozenset(
    {
        "ok",
        "timeout_before",
        "timeout_after",
        "unavailable",
        "rate_limited",
        "decline",
        "apply_then_die",
    }
)
LOOKUP_STEPS = frozenset({"ok", "timeout", "unavailable", "rate_limited"})
ALIASES = {"503": "unavailable", "429": "rate_limited", "timeout": "timeout_after"}


class ProviderDied(ConnectionResetError):
    """In process, "the provider died after applying": the caller sees a reset."""


@dataclass
class FaultRule:
    op: str  # "refund" or "lookup"
    match: str  # substring of the idempotency key; "" matches every call
    steps: Iterator[str]
    text: str = ""

    def matches(self, op: str, key: str) -> bool:
        return self.op == op and self.match in key


def parse_rule(spec: str) -> FaultRule:
    """`[lookup:][MATCH=]STEP[*N],...` -> a rule; ValueError says what is wrong."""
    text = spec.strip()
    op, rest = ("lookup", text[7:]) if text.startswith("lookup:") else ("refund", text)
    match, _, steps_text = rest.rpartition("=")
    allowed = LOOKUP_STEPS if op == "lookup" else STEPS
    parts: list[Iterable[str]] = []
    for part in filter(None, (p.strip() for p in steps_text.split(","))):
        name, star, count = part.partition("*")
        name = name.strip()
        name = name if op == "lookup" and name == "timeout" else ALIASES.get(name, name)
        if name not in allowed:
            raise ValueError(f"unknown {op} fault {name!r}; use one of {sorted(allowed)}")
        if star and not count.strip():
            parts.append(itertools.repeat(name))
        else:
            parts.append(itertools.repeat(name, int(count) if star else 1))
    if not parts:
        raise ValueError(f"fault rule {spec!r} has no steps")
    return FaultRule(op, match.strip(), itertools.chain(*parts), text)


def parse_rules(specs: Iterable[str]) -> list[FaultRule]:
    return [parse_rule(s) for spec in specs for s in spec.split(";") if s.strip()]


@dataclass
class FaultScript:
    """Scripted faults, consumed one step per call; thread-safe."""

    rules: list[FaultRule] = field(default_factory=list)
    stall: Callable[[], None] = lambda: None
    die: Callable[[], None] | None = None
    calls: Counter[tuple[str, str]] = field(default_factory=Counter)
    # Per key, as a provider that never deduplicates sees it: refunds answered, and
    # refunds received after one was answered (a second send nothing excuses).
    answered: Counter[str] = field(default_factory=Counter)
    resent: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._local = threading.local()

    @classmethod
    def from_env(cls, environ: Any = None, **kwargs: Any) -> FaultScript:
        raw = (environ if environ is not None else os.environ).get(FAULTS_ENV, "")
        return cls(parse_rules([raw]), **kwargs)

    def add(self, *specs: str) -> None:
        rules = parse_rules(specs)
        with self._lock:
            self.rules.extend(rules)

    def reset(self, specs: Iterable[str] = ()) -> None:
        rules = parse_rules(specs)
        with self._lock:
            self.rules = rules
            self.calls.clear()
            self.answered.clear()
            self.resent.clear()

    def _next(self, op: str, key: str) -> str:
        with self._lock:
            self.calls[(op, key)] += 1
            if op == "refund" and self.answered[key]:
                self.resent[key] += 1
            for rule in self.rules:
                if rule.matches(op, key):
                    step = next(rule.steps, None)
                    if step is not None:
                        return step
            return "ok"

    # -- ProviderFaults ------------------------------------------------------------------

    def before_refund(self, idempotency_key: str) -> None:
        step = self._next("refund", idempotency_key)
        self._local.step = step  # the same call's after_refund acts out the rest
        if step == "timeout_before":
            self.stall()
            raise UpstreamTimeout("simulated: no answer, nothing applied")
        if step == "unavailable":
            raise TemporarilyUnavailable("simulated 503")
        if step == "rate_limited":
            raise RateLimited("simulated 429", retry_after_s=0)
        if step == "decline":
            raise ExecutionFailed("simulated: the card was closed")

    def after_refund(self, idempotency_key: str, result: dict[str, Any]) -> None:
        step, self._local.step = getattr(self._local, "step", "ok"), "ok"
        if step == "timeout_after":
            self.stall()
            raise UpstreamTimeout("simulated: applied, answer lost")
        if step == "apply_then_die":
            if self.die is not None:
                self.die()
            raise ProviderDied("simulated: applied, then the provider died")

    def before_lookup(self, idempotency_key: str) -> None:
        step = self._next("lookup", idempotency_key)
        if step == "timeout":
            self.stall()
            raise UpstreamTimeout("simulated: lookup got no answer")
        if step == "unavailable":
            raise TemporarilyUnavailable("simulated 503 on lookup")
        if step == "rate_limited":
            raise RateLimited("simulated 429 on lookup", retry_after_s=0)

    def refund_answered(self, idempotency_key: str) -> None:
        """A refund's answer went out (the HTTP server wrote it to the socket)."""
        with self._lock:
            self.answered[idempotency_key] += 1

    def call_counts(self) -> dict[str, dict[str, int]]:
        """Per key: `refund` and `lookup` requests received, `answered` refunds, and
        `resent` refunds received after one had been answered."""
        with self._lock:
            out: dict[str, dict[str, int]] = {"refund": {}, "lookup": {}}
            for (op, key), n in self.calls.items():
                out[op][key] = n
            out["answered"] = dict(self.answered)
            out["resent"] = dict(self.resent)
            return out
