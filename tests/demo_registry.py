"""The demo's tools as the protocol's registry, for tests that build the services by
hand (the demo itself opens through `Writegate.open`)."""

from __future__ import annotations

from writegate.demo.domain import domain_tools
from writegate.demo.provider import ProviderClient
from writegate.tools.registry import Registry


def default_registry(provider: ProviderClient) -> Registry:
    """The eight domain tools' protocol views, by name; refunds go to `provider`."""
    return Registry(tool.spec for tool in domain_tools(provider))
