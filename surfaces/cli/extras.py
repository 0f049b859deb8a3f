"""What a command needs beyond the core install, and the one line it says without it.

`serve` and `mcp` import their servers when they run; without the extra that brings
them, the import fails. `needs_extra` turns exactly that failure (a module of the
extra, not any other) into `MissingExtra`, which the entry point prints as one line
naming the extra and how to install it; any other missing module stays a bug to see.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import version

# The top-level modules each extra brings (its packages and theirs).
EXTRA_MODULES: dict[str, frozenset[str]] = {
    "server": frozenset({"fastapi", "uvicorn", "starlette", "prometheus_client", "sse_starlette"}),
    "mcp": frozenset({"mcp", "mcp_types", "uvicorn", "starlette", "sse_starlette", "httpx2"}),
}


class MissingExtra(Exception):
    """A command ran without the extra it needs; the message says how to install it."""

    def __init__(self, command: str, extra: str, module: str) -> None:
        wheel = f"writegate-{version('writegate')}-py3-none-any.whl"
        super().__init__(
            f"`writegate {command}` needs writegate's [{extra}] extra, which is not "
            f"installed (no module named {module!r}): install writegate with it, e.g. "
            f'`pip install ".[{extra}]"` in a checkout or `pip install "{wheel}[{extra}]"` '
            "(see docs/install.md)"
        )


@contextmanager
def needs_extra(command: str, extra: str) -> Iterator[None]:
    """Imports under this block that fail for a module of `extra` raise `MissingExtra`."""
    try:
        yield
    except ModuleNotFoundError as exc:
        module = (exc.name or "").split(".")[0]
        if module not in EXTRA_MODULES[extra]:
            raise
        raise MissingExtra(command, extra, module) from exc
