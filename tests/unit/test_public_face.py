"""The public face is pinned: what `writegate` and `writegate.testing` export is all a
user needs and all that is public (every other module is internal). A change here is a
change of the library's contract: deliberate, and said in the docs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import writegate
import writegate.testing

ROOT = Path(__file__).resolve().parents[2]

WRITEGATE = [
    "ActionRequest", "AmountOf", "ApprovalRequest", "ApproveDecision", "AuditRow", "Cancel",
    "Checked", "ClarificationNeeded", "Confirm", "Decline", "Edit", "EditDecision",
    "EditedAction", "ErrorBody", "ExecutionFailed", "Forbidden", "GuardedTool", "HitlDecisions",
    "IdempotencyConflict", "Identity", "IdentityConflict", "InvalidTransition", "MissingIdentity",
    "NotFound",
    "Policy", "PreviewField", "PreviewFieldView", "PreviewView", "ProposalView", "RateLimited",
    "Receipt", "RejectDecision", "RespondWith", "RetryPolicy", "ReviewConfig", "ScopeChanged",
    "ScopeOf", "ServerUserFields", "StateChanged", "TemporarilyUnavailable", "ToolPreview",
    "Unprotected", "UpstreamTimeout", "ValidationFailed", "WriteToolOptions", "Writegate",
    "WritegateError", "__version__", "error_for_code", "read_tool", "resume_requester",
    "write_tool",
    "describe_currency", "format_minor", "MigrationList", "apply_migrations",
    "second_approval_run",
    "resolve_database_url", "describe_database", "setup_database", "Pool", "open_pool",
    "server_agent",
    "openai_chat_model", "describe_openai_model",
]  # fmt: skip
TESTING = [
    "Fault", "FaultHook", "Outcome", "ReadScenario", "Report", "Scenario", "ScenarioResult",
    "ScriptedChatModel", "check_read_tool", "check_write_tool", "throwaway_database",
]  # fmt: skip


def test_writegate_exports_exactly_its_pinned_names() -> None:
    assert sorted(writegate.__all__) == sorted(WRITEGATE)


def test_writegate_testing_exports_exactly_its_pinned_names() -> None:
    assert sorted(writegate.testing.__all__) == sorted(TESTING)


@pytest.mark.parametrize("name", WRITEGATE)
def test_every_exported_name_resolves(name: str) -> None:
    assert getattr(writegate, name) is not None


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Runtime'"):
        writegate.Runtime  # noqa: B018


def test_importing_the_face_loads_neither_langgraph_nor_the_database_driver() -> None:
    code = (
        "import sys, writegate\n"
        "heavy = {'langgraph', 'psycopg', 'langchain_openai'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_docs_and_examples_import_only_from_the_public_faces() -> None:
    """What a user copies imports from `writegate` or `writegate.testing`, nothing deeper."""
    texts = [
        ROOT / "README.md",
        *sorted((ROOT / "docs").rglob("*.md")),
        *sorted((ROOT / "examples").glob("*.py")),
    ]
    deep = [
        f"{path.relative_to(ROOT)}: {line.strip()}"
        for path in texts
        for line in path.read_text(encoding="utf-8").splitlines()
        if re.search(r"\bfrom writegate\.(?!testing\b)|\bimport writegate\.(?!testing\b)", line)
    ]
    assert deep == []
