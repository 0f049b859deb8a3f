"""What a test needs from the operating system, and how a missing piece is said.

A test that needs a system package the machine lacks skips with `missing()`'s reason:
it names the package and the line that installs it. Nothing else may skip for want of
the machine. Under CI=true `.ci/run` installs every package, so tests/conftest.py turns
such a skip into a failure (`is_missing_package`): CI never skips these tests.
"""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path

import pytest

MARK = "missing system package"
CHROMIUM = Path("/usr/bin/chromium")  # Debian's, the one the browser tests drive
# Headless, and quiet on a machine whose network is closed: no background connections.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
CJK_FONTS = "/usr/share/fonts/**/*CJK*"


def missing(packages: str, needed_by: str) -> str:
    """The skip reason for `packages` (apt names, space separated) `needed_by` tests."""
    return f"{MARK} {packages} ({needed_by}): apt-get install {packages}"


def is_missing_package(reason: str) -> bool:
    """Whether a skip reason is one `missing()` wrote."""
    return MARK in reason


def on_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() == "true"


def _runs(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def browser_missing() -> str | None:
    """Why the browser tests cannot run here (Chromium or a CJK font), or None."""
    absent = [] if _runs(CHROMIUM) else ["chromium"]
    if not glob.glob(CJK_FONTS, recursive=True):
        absent.append("fonts-noto-cjk")
    return missing(" ".join(absent), "the browser tests") if absent else None


def tools_missing(tools: tuple[str, ...], needed_by: str) -> str | None:
    """Why tests needing these commands (each its own apt package) cannot run, or None."""
    absent = [tool for tool in tools if shutil.which(tool) is None]
    return missing(" ".join(absent), needed_by) if absent else None


def fail_on_ci(report: pytest.TestReport) -> None:
    """Under CI=true, turn a skip for a missing system package into a failure."""
    if not (report.skipped and on_ci() and isinstance(report.longrepr, tuple)):
        return
    reason = str(report.longrepr[2]).removeprefix("Skipped: ")
    if is_missing_package(reason):
        report.outcome = "failed"
        report.longrepr = f"CI=true, yet {reason}; .ci/run installs it"
