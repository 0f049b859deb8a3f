"""One version, from the package metadata: `writegate --version` and
`writegate.__version__` say what the installed distribution says."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version
from pathlib import Path

from typer.testing import CliRunner

import writegate
from writegate.__main__ import command

ROOT = Path(__file__).resolve().parents[2]


def test_the_module_version_is_the_distributions() -> None:
    assert writegate.__version__ == version("writegate")


def test_the_distribution_is_the_version_pyproject_names() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert version("writegate") == declared


def test_writegate_version_prints_the_name_and_the_version() -> None:
    done = CliRunner().invoke(command(), ["--version"])
    assert done.exit_code == 0, done.output
    assert done.stdout == f"writegate {version('writegate')}\n"


def test_the_changelog_has_a_section_for_this_version() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(
        rf"^## \[[^\]]+\] - {re.escape(writegate.__version__)}$|"
        rf"^## \[{re.escape(writegate.__version__)}\]",
        changelog,
        re.M,
    )
