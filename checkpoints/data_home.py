"""Where the embedded PostgreSQL keeps its data, and keeping its handle list honest.

The folder is anchored, never relative to the current directory (a notebook kernel
starting in notebooks/ would otherwise get a second, empty cluster):
``$WRITEGATE_HOME/pgdata``; else, when running from a source checkout (the package
folder holds the project's pyproject.toml), ``<checkout>/.writegate/pgdata``; else the
user's data directory (``$XDG_DATA_HOME/writegate/pgdata``, by default
``~/.local/share/writegate/pgdata``; ``~/Library/Application Support/writegate`` on
macOS, ``%LOCALAPPDATA%\\writegate`` on Windows).

The embedded server package records each process using the server in
``pgdata/.handle_pids.json`` and stops the server when the last one leaves; a process
killed abnormally never leaves, so its pid kept the server running forever.
`prune_dead_pids` drops pids of processes that no longer exist.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

HANDLE_PIDS_FILE = ".handle_pids.json"
_PACKAGE_DIR = Path(__file__).resolve().parent.parent


def data_home() -> Path:
    """The folder holding writegate's local data (the embedded server's ``pgdata``)."""
    home = os.environ.get("WRITEGATE_HOME", "").strip()
    if home:
        return Path(home).expanduser().resolve()
    checkout = source_checkout()
    if checkout is not None:
        return checkout / ".writegate"
    return user_data_dir() / "writegate"


def source_checkout(package_dir: Path = _PACKAGE_DIR) -> Path | None:
    """The checkout's root when the package runs from one (its pyproject names it)."""
    pyproject = package_dir / "pyproject.toml"
    try:
        text = pyproject.read_text(encoding="utf-8")
    except OSError:
        return None
    return package_dir if 'name = "writegate"' in text else None


def user_data_dir() -> Path:
    """The platform's per-user data directory (platformdirs' convention)."""
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support"
    xdg = os.environ.get("XDG_DATA_HOME", "").strip()
    return Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "share"


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (signal 0 probes without sending)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, it is just not ours
    except OSError:
        return False
    return True


def prune_dead_pids(pgdata: Path) -> list[int]:
    """Drop dead pids from the server's handle list; return the ones dropped."""
    path = pgdata / HANDLE_PIDS_FILE
    try:
        pids = json.loads(path.read_text(encoding="utf-8") or "[]")
    except (OSError, ValueError):
        return []
    if not isinstance(pids, list):
        return []
    alive = [p for p in pids if isinstance(p, int) and pid_alive(p)]
    dead = [p for p in pids if p not in alive]
    if dead:
        path.write_text(json.dumps(alive), encoding="utf-8")
    return dead
