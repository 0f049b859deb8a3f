"""What a failover soak (`failover_soak.py`) saw and counted: each operation, each
failover, and the figures it prints."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Op:
    n: int
    order: str
    point: str = ""  # the failover it carries, if any
    proposal_id: str = ""
    thread_id: str = ""
    answers: list[str] = field(default_factory=list)  # what the person saw, in order
    receipt_ref: str | None = None  # the provider reference the person was shown
    lost: str = ""  # which of its rows the promoted standby was missing


@dataclass
class Failover:
    point: str
    freeze: str
    killed_at: float
    promoted_s: float = 0.0  # kill -> the standby takes writes (the engine)
    writes_again_s: float = 0.0  # kill -> the next click that executed (the person)
    clicks: list[str] = field(default_factory=list)  # the click in flight: answers, when
    lost_ops: int = 0  # operations with rows the old primary had and the new one lacks


@dataclass
class Figures:
    operations: int = 0
    failovers: list[Failover] = field(default_factory=list)
    check: Counter[str] = field(default_factory=Counter)
    seen: Counter[str] = field(default_factory=Counter)  # every HTTP answer, by status/code
    model_saw: Counter[str] = field(default_factory=Counter)  # the refund's tool message
    problems: list[str] = field(default_factory=list)
    # Lost commits that writegate did not find again: an operation sent again under its
    # key without a lookup, or left at the provider with neither a record nor a person.
    gaps: list[str] = field(default_factory=list)
    seconds: float = 0.0
    sends_per_key: Counter[int] = field(default_factory=Counter)  # sends -> keys

    def line(self, seed: int) -> str:
        c = self.check
        return (
            f"operations {self.operations}, failovers {len(self.failovers)}, "
            f"effects {c['effects']}, duplicates {c['duplicates']}, lost {c['lost']}, seed {seed}"
        )

    def details(self) -> str:
        per = Counter(f.point for f in self.failovers)
        times = [f"{f.point}/{f.freeze}: promoted {f.promoted_s:.1f} s, writes again "
                 f"{f.writes_again_s:.1f} s, operations with lost rows {f.lost_ops}; "
                 f"the click: {', '.join(f.clicks)}"
                 for f in self.failovers]  # fmt: skip
        c = self.check
        return (
            f"sends per key {dict(sorted(self.sends_per_key.items()))}; "
            f"failovers per point {dict(per)}; settled {c['settled']}, escalated "
            f"{c['escalated']}; operations with lost rows {c['lost_rows']}: found again "
            f"by their key {c['found_again']} ({c['found_by_check']} recorded by the check "
            f"after the promotion), sent again under their key without a lookup "
            f"{c['blind']}, not done (and told so) {c['not_done']}, lost whole and escalated "
            f"{c['escalated_whole']} (of {c['vanished']} with no execution row); "
            f"wall time {self.seconds:.0f} s\n"
            f"  the person saw: {dict(sorted(self.seen.items()))}\n"
            f"  the model saw: {dict(sorted(self.model_saw.items()))}\n"
            + "\n".join(f"  {t}" for t in times)
            + "".join(f"\n  problem: {p}" for p in self.problems)
            + "".join(f"\n  not found again: {g}" for g in self.gaps)
        )
