"""writegate: an LLM agent proposes a write, a person confirms the exact preview, and
the write runs at most once, with a receipt and an audit trail.

As a library, in front of your own tools (see docs/first-tool.md):

    from writegate import Writegate, write_tool, read_tool

This module is the public face: everything a user needs is importable from here (the
entry point, the tool kit, the settings, the typed question and answers, the errors),
and `writegate.testing` holds the conformance kit. Every other module is internal and
may change without notice. Names load on first use, so `import writegate` stays light.
"""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from writegate.approval.contract import (
        ActionRequest,
        ApprovalRequest,
        ApproveDecision,
        EditDecision,
        EditedAction,
        ErrorBody,
        HitlDecisions,
        PreviewFieldView,
        PreviewView,
        RejectDecision,
        RespondWith,
        ReviewConfig,
    )
    from writegate.approval.decisions import (
        Cancel,
        Confirm,
        Decline,
        Edit,
    )
    from writegate.approval.errors import (
        ClarificationNeeded,
        ExecutionFailed,
        Forbidden,
        IdempotencyConflict,
        IdentityConflict,
        InvalidTransition,
        MissingIdentity,
        NotFound,
        RateLimited,
        ScopeChanged,
        StateChanged,
        TemporarilyUnavailable,
        Unprotected,
        UpstreamTimeout,
        ValidationFailed,
        WritegateError,
        error_for_code,
    )
    from writegate.approval.models import (
        Identity,
        Receipt,
    )
    from writegate.approval.money import (
        describe_currency,
        format_minor,
    )
    from writegate.approval.policy import (
        Policy,
    )
    from writegate.approval.retry import (
        RetryPolicy,
    )
    from writegate.approval.views import (
        AuditRow,
        ProposalView,
    )
    from writegate.checkpoints.database import describe_database, resolve_database_url
    from writegate.checkpoints.migrate import (
        MigrationList,
        apply_migrations,
    )
    from writegate.checkpoints.pool import Pool, open_pool
    from writegate.checkpoints.schema import setup_database
    from writegate.graph.model import (
        describe_openai_model,
        openai_chat_model,
    )
    from writegate.graph.second import (
        second_approval_run,
    )
    from writegate.graph.server_resume import (
        resume_requester,
    )
    from writegate.runtime.wiring import ServerUserFields
    from writegate.runtime.writegate import (
        Writegate,
        server_agent,
    )
    from writegate.tools.kit import (
        GuardedTool,
        WriteToolOptions,
        read_tool,
        write_tool,
    )
    from writegate.tools.kit_spec import (
        AmountOf,
        Checked,
        PreviewField,
        ScopeOf,
        ToolPreview,
    )

__all__ = [
    "ActionRequest",
    "AmountOf",
    "ApprovalRequest",
    "ApproveDecision",
    "AuditRow",
    "Cancel",
    "Checked",
    "ClarificationNeeded",
    "Confirm",
    "Decline",
    "Edit",
    "EditDecision",
    "EditedAction",
    "ErrorBody",
    "ExecutionFailed",
    "Forbidden",
    "GuardedTool",
    "HitlDecisions",
    "IdempotencyConflict",
    "Identity",
    "IdentityConflict",
    "InvalidTransition",
    "MigrationList",
    "MissingIdentity",
    "NotFound",
    "Policy",
    "Pool",
    "PreviewField",
    "PreviewFieldView",
    "PreviewView",
    "ProposalView",
    "RateLimited",
    "Receipt",
    "RejectDecision",
    "RespondWith",
    "RetryPolicy",
    "ReviewConfig",
    "ScopeChanged",
    "ScopeOf",
    "ServerUserFields",
    "StateChanged",
    "TemporarilyUnavailable",
    "ToolPreview",
    "Unprotected",
    "UpstreamTimeout",
    "ValidationFailed",
    "WriteToolOptions",
    "Writegate",
    "WritegateError",
    "__version__",
    "apply_migrations",
    "describe_currency",
    "describe_database",
    "describe_openai_model",
    "error_for_code",
    "format_minor",
    "open_pool",
    "openai_chat_model",
    "read_tool",
    "resolve_database_url",
    "resume_requester",
    "second_approval_run",
    "server_agent",
    "setup_database",
    "write_tool",
]

try:
    __version__ = version("writegate")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0.0.0"

_WHERE = {
    "ActionRequest": "writegate.approval.contract",
    "AmountOf": "writegate.tools.kit_spec",
    "ApprovalRequest": "writegate.approval.contract",
    "ApproveDecision": "writegate.approval.contract",
    "AuditRow": "writegate.approval.views",
    "Cancel": "writegate.approval.decisions",
    "Checked": "writegate.tools.kit_spec",
    "ClarificationNeeded": "writegate.approval.errors",
    "Confirm": "writegate.approval.decisions",
    "Decline": "writegate.approval.decisions",
    "Edit": "writegate.approval.decisions",
    "EditDecision": "writegate.approval.contract",
    "EditedAction": "writegate.approval.contract",
    "ErrorBody": "writegate.approval.contract",
    "ExecutionFailed": "writegate.approval.errors",
    "Forbidden": "writegate.approval.errors",
    "GuardedTool": "writegate.tools.kit",
    "HitlDecisions": "writegate.approval.contract",
    "IdempotencyConflict": "writegate.approval.errors",
    "Identity": "writegate.approval.models",
    "IdentityConflict": "writegate.approval.errors",
    "InvalidTransition": "writegate.approval.errors",
    "MigrationList": "writegate.checkpoints.migrate",
    "MissingIdentity": "writegate.approval.errors",
    "NotFound": "writegate.approval.errors",
    "Policy": "writegate.approval.policy",
    "Pool": "writegate.checkpoints.pool",
    "PreviewField": "writegate.tools.kit_spec",
    "PreviewFieldView": "writegate.approval.contract",
    "PreviewView": "writegate.approval.contract",
    "ProposalView": "writegate.approval.views",
    "RateLimited": "writegate.approval.errors",
    "Receipt": "writegate.approval.models",
    "RejectDecision": "writegate.approval.contract",
    "RespondWith": "writegate.approval.contract",
    "RetryPolicy": "writegate.approval.retry",
    "ReviewConfig": "writegate.approval.contract",
    "ScopeChanged": "writegate.approval.errors",
    "ScopeOf": "writegate.tools.kit_spec",
    "ServerUserFields": "writegate.runtime.wiring",
    "StateChanged": "writegate.approval.errors",
    "TemporarilyUnavailable": "writegate.approval.errors",
    "ToolPreview": "writegate.tools.kit_spec",
    "Unprotected": "writegate.approval.errors",
    "UpstreamTimeout": "writegate.approval.errors",
    "ValidationFailed": "writegate.approval.errors",
    "WriteToolOptions": "writegate.tools.kit",
    "Writegate": "writegate.runtime.writegate",
    "WritegateError": "writegate.approval.errors",
    "apply_migrations": "writegate.checkpoints.migrate",
    "describe_currency": "writegate.approval.money",
    "describe_database": "writegate.checkpoints.database",
    "describe_openai_model": "writegate.graph.model",
    "error_for_code": "writegate.approval.errors",
    "format_minor": "writegate.approval.money",
    "open_pool": "writegate.checkpoints.pool",
    "openai_chat_model": "writegate.graph.model",
    "read_tool": "writegate.tools.kit",
    "resolve_database_url": "writegate.checkpoints.database",
    "resume_requester": "writegate.graph.server_resume",
    "second_approval_run": "writegate.graph.second",
    "server_agent": "writegate.runtime.writegate",
    "setup_database": "writegate.checkpoints.schema",
    "write_tool": "writegate.tools.kit",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'writegate' has no attribute {name!r}")
    value = getattr(import_module(_WHERE[name]), name)
    globals()[name] = value
    return value
