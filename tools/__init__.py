"""The tool kit: `write_tool` and `read_tool` declare anyone's tool for writegate, with
its side effect and how to validate, preview and run one operation; the approval
protocol in `approval/` decides when. The demo built with the kit (orders, refunds,
tickets, the payment provider) is an application of its own, in `demo/`. This package
imports `approval` only.
"""

if __name__ != "writegate.tools":  # the repository root is the package `writegate`
    raise ImportError(f"import writegate.tools, not {__name__} (see CONTRIBUTING.md)")
from writegate.tools.kit import GuardedTool, read_tool, write_tool
from writegate.tools.registry import Registry

__all__ = ["GuardedTool", "Registry", "read_tool", "write_tool"]
