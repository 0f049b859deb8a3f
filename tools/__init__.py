"""Domain tools for writegate: orders, refunds and support tickets, and the tool kit.

Every tool, the demo's included, is declared with the public kit (`write_tool`,
`read_tool` in `tools/kit.py`): it states its side effect and how to validate, preview
and run one operation; the approval protocol in `approval/` decides when.
`default_registry(provider)` builds all eight. This package may import `approval` and
nothing else of the project.
"""

if __name__ != "writegate.tools":  # the repository root is the package `writegate`
    raise ImportError(f"import writegate.tools, not {__name__} (see CONTRIBUTING.md)")
from writegate.tools.domain import default_registry, domain_tools
from writegate.tools.kit import GuardedTool, read_tool, write_tool
from writegate.tools.provider import ProviderClient, SimulatedProvider
from writegate.tools.registry import Registry

__all__ = [
    "GuardedTool",
    "ProviderClient",
    "Registry",
    "SimulatedProvider",
    "default_registry",
    "domain_tools",
    "read_tool",
    "write_tool",
]
