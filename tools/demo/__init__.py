"""The demo domain, built with the public kit as anyone's tools are: orders and refunds
through a payment provider (its simulator and HTTP client), support tickets, a batch
close, their tables (`tools/demo/schema.py`, a migration list of their own), seed data
and fault scripts. Only the demo commands, the tests and the bench load it; the library
never does.
"""

from writegate.tools.demo.domain import default_registry, domain_tools
from writegate.tools.demo.provider import ProviderClient, SimulatedProvider

__all__ = ["ProviderClient", "SimulatedProvider", "default_registry", "domain_tools"]
