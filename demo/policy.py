"""The demo application's approval policy: writegate's tiers, with its operations listed.

`demo/policy.toml` is what a user's own policy file is: the shipped one, plus the
application's `[operations.<tool>]` (sensitivity and the field a retype tier asks
for). Every demo entry point reads it through `demo_policy`, so tokens agree across
processes; `WRITEGATE_POLICY_FILE` still names another file for all of them.
"""

from __future__ import annotations

from pathlib import Path

from writegate import Policy

DEMO_POLICY_FILE = Path(__file__).with_name("policy.toml")


def demo_policy() -> Policy:
    """The file `WRITEGATE_POLICY_FILE` names, else the demo's own."""
    return Policy.load(default=DEMO_POLICY_FILE)
