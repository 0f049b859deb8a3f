"""MCP tool hints follow the side effect a tool declares, not how it is wired."""

from __future__ import annotations

from typing import Any

import pytest

from writegate.surfaces.mcp_server.tools import Route, execute_name, mcp_tool
from writegate.tools.kit import write_tool


def _declared(side_effect: str) -> Any:
    @write_tool(side_effect=side_effect, name=f"rename_{side_effect}")
    def rename(label: str, *, request_key: str) -> dict[str, Any]:
        """Rename a label in a service of our own."""
        return {"label": label}

    return rename.spec


@pytest.mark.parametrize(
    ("side_effect", "open_world"),
    [("reversible", False), ("irreversible", False), ("external", True)],
)
def test_a_write_tools_open_world_hint_follows_its_declared_side_effect(
    side_effect: str, open_world: bool
) -> None:
    spec = _declared(side_effect)
    assert spec.has_downstream  # every write_tool function runs as a downstream call
    tool = mcp_tool(execute_name(spec.name), Route("execute", spec))
    assert tool.annotations is not None
    assert tool.annotations.open_world_hint is open_world
