"""writegate: an LLM agent proposes a write, a person confirms the exact preview, and
the write runs at most once, with a receipt and an audit trail.

As a library, in front of your own tools (see docs/library.md):

    from writegate import Writegate, write_tool, read_tool

Installed, every module lives under this one name: `writegate.approval` (the protocol),
`writegate.tools`, `writegate.checkpoints` (PostgreSQL), `writegate.graph` (the agent),
`writegate.surfaces` (CLI, HTTP, MCP), `writegate.bench` and `writegate.testing` (the
conformance kit for your own write tools). Names below are loaded on first use, so
`import writegate` stays light.
"""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from writegate.approval.downstream import RetryPolicy
    from writegate.approval.errors import (
        InvalidTransition,
        NotFound,
        RateLimited,
        StateChanged,
        TemporarilyUnavailable,
        UpstreamTimeout,
        ValidationFailed,
        WritegateError,
    )
    from writegate.approval.models import Identity
    from writegate.graph.identity import ServerUserFields
    from writegate.graph.writegate import Writegate
    from writegate.tools.kit import read_tool, write_tool
    from writegate.tools.kit_spec import Checked, PreviewField, ToolPreview

__all__ = [
    "Checked",
    "Identity",
    "InvalidTransition",
    "NotFound",
    "PreviewField",
    "RateLimited",
    "RetryPolicy",
    "ServerUserFields",
    "StateChanged",
    "TemporarilyUnavailable",
    "ToolPreview",
    "UpstreamTimeout",
    "ValidationFailed",
    "Writegate",
    "WritegateError",
    "__version__",
    "read_tool",
    "write_tool",
]

try:
    __version__ = version("writegate")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0.0.0"

_WHERE = {
    "Checked": "writegate.tools.kit_spec",
    "Identity": "writegate.approval.models",
    "InvalidTransition": "writegate.approval.errors",
    "NotFound": "writegate.approval.errors",
    "RateLimited": "writegate.approval.errors",
    "RetryPolicy": "writegate.approval.downstream",
    "StateChanged": "writegate.approval.errors",
    "TemporarilyUnavailable": "writegate.approval.errors",
    "UpstreamTimeout": "writegate.approval.errors",
    "ValidationFailed": "writegate.approval.errors",
    "WritegateError": "writegate.approval.errors",
    "PreviewField": "writegate.tools.kit_spec",
    "ServerUserFields": "writegate.graph.identity",
    "ToolPreview": "writegate.tools.kit_spec",
    "Writegate": "writegate.graph.writegate",
    "read_tool": "writegate.tools.kit",
    "write_tool": "writegate.tools.kit",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'writegate' has no attribute {name!r}")
    value = getattr(import_module(_WHERE[name]), name)
    globals()[name] = value
    return value
