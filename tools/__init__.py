"""Domain tools for writegate: orders, refunds and support tickets.

Each tool declares its side effect and whether it needs approval, validates and
previews one operation, and applies it inside the caller's transaction; the approval
protocol in `approval/` decides when. `default_registry(provider)` builds all seven.
This package may import `approval` and nothing else of the project.
"""

from writegate.tools.provider import ProviderClient, SimulatedProvider
from writegate.tools.registry import Registry, Tool, default_registry

__all__ = ["ProviderClient", "Registry", "SimulatedProvider", "Tool", "default_registry"]
