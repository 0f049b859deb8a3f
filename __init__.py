"""writegate: an LLM agent proposes a write, a person confirms the exact preview, and
the write runs at most once, with a receipt and an audit trail.

Installed, every module lives under this one name: `writegate.approval` (the protocol),
`writegate.tools`, `writegate.checkpoints` (PostgreSQL), `writegate.graph` (the agent),
`writegate.surfaces` (CLI, HTTP, MCP) and `writegate.bench`.
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.2.0"
