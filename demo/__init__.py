"""The demo application, built with the public kit as anyone's tools are: orders and
refunds through a payment provider (its simulator and HTTP client), support tickets, a
batch close, their tables (`schema.py`, a migration list of their own), seed data,
fault scripts, its policy (`policy.toml`), its agent's prompt (`prompt.py`) and model
(`model.py`: OpenAI when configured, else the scripted demo model, `scripted.py`,
following `scripted_rules.py`), its runtime (`runtime.py`), how the commands that are not its own
serve it on its database (`served.py`), the Studio entry (`studio.py`, which
`langgraph.json` serves as `writegate`) and its own commands (`cli/`: `writegate demo`,
`chat`, `db seed`, `db reset`, `provider serve`, which `writegate.console` composes into
the `writegate` command and hands the command line's consoles and rendering). It
imports what `writegate` and `writegate.testing` export and its own modules, plus the
one name tests/unit/test_demo_face.py pins; never a surface. Only the `writegate`
command, the tests and the bench load it: the library never does.
"""

if __name__ != "writegate.demo":  # the repository root is the package `writegate`
    raise ImportError(f"import writegate.demo, not {__name__} (see CONTRIBUTING.md)")

from writegate.demo.domain import domain_tools
from writegate.demo.provider import ProviderClient, SimulatedProvider

__all__ = ["ProviderClient", "SimulatedProvider", "domain_tools"]
