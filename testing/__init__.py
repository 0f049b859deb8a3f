"""writegate's conformance kit: check that YOUR tools keep writegate's invariants.

    from writegate.testing import check_write_tool

    def test_pay_conforms(writegate_database):
        report = check_write_tool(pay, args=fresh_payment, edited=smaller,
                                  effects=count_payments, database_url=writegate_database)
        report.assert_ok()

Each `Scenario` is a short run against a real PostgreSQL: nothing runs before a
confirm, many concurrent confirms give one effect, a stranger's replay is refused, an
edit replaces what was confirmed, a lost answer is `unknown` (settled by the lookup or
escalated, never re-sent blindly) and every retry carries the same request key.
`check_read_tool(get_balance, args=..., database_url=...)` checks a read tool's
`ReadScenario`s: it runs at once, every call is audited with who made it, it has no
write path, and who acts comes from the host, never from its arguments. The
`writegate_database` fixture comes from `writegate.testing.pytest_plugin`.
`ScriptedChatModel` is a chat model that replies from a script: a test's, or a
notebook's, stand-in for a real model. See docs/testing.md.
"""

from __future__ import annotations

if __name__ != "writegate.testing":  # the repository root is the package `writegate`
    raise ImportError(f"import writegate.testing, not {__name__} (see CONTRIBUTING.md)")

from writegate.graph.scripted import ScriptedChatModel
from writegate.testing.check import check_write_tool
from writegate.testing.database import throwaway_database
from writegate.testing.read_check import check_read_tool
from writegate.testing.recorder import Fault, FaultHook
from writegate.testing.report import Outcome, ReadScenario, Report, Scenario, ScenarioResult

__all__ = [
    "Fault",
    "FaultHook",
    "Outcome",
    "ReadScenario",
    "Report",
    "Scenario",
    "ScenarioResult",
    "ScriptedChatModel",
    "check_read_tool",
    "check_write_tool",
    "throwaway_database",
]
