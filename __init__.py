"""writegate: an LLM agent proposes a write, a person confirms the exact preview, and
the write runs at most once, with a receipt and an audit trail.

Installed, every module lives under this one name: `writegate.approval` (the protocol),
`writegate.tools`, `writegate.checkpoints` (PostgreSQL), `writegate.graph` (the agent),
`writegate.surfaces` (CLI, HTTP, MCP) and `writegate.bench`.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["__version__"]

try:
    __version__ = version("writegate")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0.0.0"
