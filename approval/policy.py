"""The approval policy: audience, lifetimes, and the rules that map risk to a tier.

The rules are configuration, not code: a TOML file (`policy_default.toml` beside this
module, or the file named by `WRITEGATE_POLICY_FILE`) that carries its own `version`.
The shipped file is generic: it lists no application's operations (the demo's are in
its own file, `demo/policy.toml`).
The policy's version is that string plus a digest of the file's content, so changing
the rules always changes the version. Every proposal and token records the version it
was made under, so an approval can be re-judged when the policy changes. `Policy()`
without rules is the legacy one-click policy: every write is confirmed with one click,
and any version change invalidates outstanding tokens, because nothing proves the new
policy would treat them the same.
"""

from __future__ import annotations

import hashlib
import os
import tomllib
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from writegate.approval.canonical import canonical_json
from writegate.approval.policy_schema import check_shape

POLICY_FILE_ENV = "WRITEGATE_POLICY_FILE"
DEFAULT_POLICY_FILE = Path(__file__).with_name("policy_default.toml")
RETYPE_MATCHES = ("number", "last4", "exact")
CONTENT_DIGEST_CHARS = 12  # of the content's SHA-256, appended to the declared version


class PolicyError(ValueError):
    """The policy file is missing, unreadable or inconsistent: refuse to start."""


@dataclass(frozen=True)
class Tier:
    """What a confirmation at this tier requires."""

    name: str
    min_score: int
    retype: bool = False
    second_approver: bool = False
    token_ttl: timedelta | None = None  # None: the policy's token_ttl
    proposal_ttl: timedelta | None = None  # None: the policy's proposal_ttl

    def requirements(self) -> dict[str, Any]:
        """What a person had to do; two tiers with equal requirements are the same tier."""
        return {"tier": self.name, "retype": self.retype, "second_approver": self.second_approver}


@dataclass(frozen=True)
class OperationRule:
    sensitivity: int = 0
    retype_field: str | None = None
    retype_match: str = "exact"
    proposal_ttl: timedelta | None = None  # None: the tool's, else the tier's, else the policy's


@dataclass(frozen=True)
class RiskRules:
    """Points per risk factor, and the tiers they lead to (ascending by min_score)."""

    tiers: tuple[Tier, ...]
    operations: dict[str, OperationRule]
    default_operation: OperationRule = OperationRule(sensitivity=1)
    amount_bands: dict[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    count_bands: tuple[tuple[int, int], ...] = ()
    irreversible: int = 1
    external: int = 1
    trust: dict[str, int] = field(default_factory=lambda: {"normal": 0})
    default_trust: str = "normal"

    def tier_for(self, score: int) -> Tier:
        chosen = self.tiers[0]
        for tier in self.tiers:
            if score >= tier.min_score:
                chosen = tier
        return chosen

    def tier_named(self, name: str) -> Tier | None:
        return next((t for t in self.tiers if t.name == name), None)

    def operation(self, name: str) -> OperationRule:
        return self.operations.get(name, self.default_operation)

    def lists(self, name: str) -> bool:
        """Whether the policy has rules of its own for this operation."""
        return name in self.operations


@dataclass(frozen=True)
class Policy:
    """Audience and lifetimes, and (optionally) the risk rules; all under one version."""

    version: str = "v1"
    audience: str = "writegate"
    proposal_ttl: timedelta = timedelta(minutes=15)
    token_ttl: timedelta = timedelta(minutes=5)
    risk: RiskRules | None = None

    @classmethod
    def load(cls, path: str | Path | None = None, *, default: str | Path | None = None) -> Policy:
        """The policy file at `path`, else the one `WRITEGATE_POLICY_FILE` names, else
        `default` (else the shipped file, which lists no operation). An application
        passes its own file as `default`, so the environment still chooses another.
        A file that cannot be read or is inconsistent raises `PolicyError`."""
        return load_policy(path, default=Path(default) if default else DEFAULT_POLICY_FILE)

    def proposal_ttl_for(
        self, operation: str, tier: Tier | None = None, declared: timedelta | None = None
    ) -> timedelta:
        """How long a proposal of `operation` waits for its decision. The most specific
        setting wins: the policy's `[operations.<name>]`, then the tool's own
        (`write_tool(expires_in=...)`, `declared`), then its tier's, then the policy's."""
        listed = self.risk.operations.get(operation) if self.risk else None
        return (
            (listed.proposal_ttl if listed else None)
            or declared
            or (tier.proposal_ttl if tier else None)
            or self.proposal_ttl
        )


def load_policy(path: str | Path | None = None, *, default: Path = DEFAULT_POLICY_FILE) -> Policy:
    """The policy from `path`, else `$WRITEGATE_POLICY_FILE`, else `default` (the shipped
    one, which lists no operation: an application lists its own, as the demo does)."""
    chosen = Path(path or os.environ.get(POLICY_FILE_ENV, "").strip() or default)
    try:
        with chosen.open("rb") as handle:
            data = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise PolicyError(f"cannot read the approval policy {chosen}: {exc}") from exc
    return parse_policy(data, source=str(chosen))


def parse_policy(data: dict[str, Any], *, source: str = "policy") -> Policy:
    """Check the shape strictly (see `policy_schema`), then build the policy.

    Its version is the file's `version` plus a digest of the whole content, so an edit
    that forgot to change `version` still makes another policy, and approvals given
    under the old rules are re-judged; comments and key order do not count.
    """
    try:
        check_shape(data)
        policy = _parse(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise PolicyError(f"{source}: {exc}") from exc
    content = hashlib.sha256(canonical_json(data)).hexdigest()[:CONTENT_DIGEST_CHARS]
    return replace(policy, version=f"{policy.version}+{content}")


def _seconds(value: Any) -> timedelta:
    if not isinstance(value, int) or value <= 0:
        raise ValueError(f"lifetimes are whole seconds > 0, got {value!r}")
    return timedelta(seconds=value)


def _bands(value: Any) -> tuple[tuple[int, int], ...]:
    bands = tuple((int(at), int(points)) for at, points in value)
    if list(bands) != sorted(bands):
        raise ValueError(f"bands must ascend: {value!r}")
    return bands


def _parse(data: dict[str, Any]) -> Policy:
    version = data["version"]
    if not isinstance(version, str) or not version.strip():
        raise ValueError("`version` must be a non-empty string")
    tiers = tuple(
        Tier(
            name=str(t["name"]),
            min_score=int(t["min_score"]),
            retype=bool(t.get("retype", False)),
            second_approver=bool(t.get("second_approver", False)),
            token_ttl=_seconds(t["token_ttl_seconds"]) if "token_ttl_seconds" in t else None,
            proposal_ttl=(
                _seconds(t["proposal_ttl_seconds"]) if "proposal_ttl_seconds" in t else None
            ),
        )
        for t in data["tiers"]
    )
    if not tiers or [t.min_score for t in tiers] != sorted({t.min_score for t in tiers}):
        raise ValueError("tiers must be listed by strictly ascending min_score")
    operations: dict[str, OperationRule] = {}
    for name, rule in data.get("operations", {}).items():
        retype = rule.get("retype") or {}
        if retype and not retype.get("field"):
            raise ValueError(
                f"[operations.{name}] retype needs its field: the argument or preview field "
                'the person types again, e.g. retype = { field = "amount_minor", match = '
                '"number" }'
            )
        match = str(retype.get("match", "exact"))
        if match not in RETYPE_MATCHES:
            raise ValueError(f"operations.{name}.retype.match must be one of {RETYPE_MATCHES}")
        waits = rule.get("proposal_ttl_seconds")
        if waits is not None and name == "default":
            raise ValueError(
                "operations.default.proposal_ttl_seconds: for every operation, set the "
                "top-level proposal_ttl_seconds instead"
            )
        operations[name] = OperationRule(
            sensitivity=int(rule.get("sensitivity", 0)),
            retype_field=retype.get("field"),
            retype_match=match,
            proposal_ttl=_seconds(waits) if waits is not None else None,
        )
    points = data.get("points", {})
    trust = {str(k): int(v) for k, v in data.get("trust", {"normal": 0}).items()}
    rules = RiskRules(
        tiers=tiers,
        operations=operations,
        default_operation=operations.pop("default", OperationRule(sensitivity=1)),
        amount_bands={cur: _bands(b) for cur, b in data.get("amount_bands", {}).items()},
        count_bands=_bands(data.get("count_bands", [])),
        irreversible=int(points.get("irreversible", 1)),
        external=int(points.get("external", 1)),
        trust=trust,
        default_trust=str(data.get("default_trust", "normal")),
    )
    return Policy(
        version=version.strip(),
        audience=str(data.get("audience", "writegate")),
        proposal_ttl=_seconds(data.get("proposal_ttl_seconds", 900)),
        token_ttl=_seconds(data.get("token_ttl_seconds", 300)),
        risk=rules,
    )
