"""`uv build` makes a wheel and an sdist, and each installs into a fresh venv and runs.

`uv build` builds the sdist first and the wheel *from the sdist*, as a package index's
users and most build tools do: so the sdist must hold everything a build needs (the
repository root is the package, CONTRIBUTING.md). Each artifact then goes into a venv
of its own (`uv venv`, `uv pip install`, tests/integration/fresh_venv.py: online or from
uv's cache) with nothing of the repository on its path, and `writegate --version` and
`writegate demo` run there against a throwaway database.
The README's install lines name the wheel that this build makes.
"""

from __future__ import annotations

import os
import re
import subprocess
import tarfile
import tomllib
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.fresh_venv import install, run_uv

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
WHEEL_CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"][
    "targets"
]["wheel"]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("dist")
    said = run_uv("build", "--out-dir", str(out), str(ROOT))
    assert "from source distribution" in said, said  # the wheel is the sdist's
    (sdist,) = out.glob("writegate-*.tar.gz")
    (wheel,) = out.glob("writegate-*.whl")
    return {"sdist": sdist, "wheel": wheel}


def _package_files() -> set[str]:
    """What the wheel must hold: every file of the folders and files it takes."""
    names: set[str] = set()
    for entry in WHEEL_CONFIG["only-include"]:
        path = ROOT / entry
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        names |= {
            "writegate/" + str(f.relative_to(ROOT))
            for f in files
            if "__pycache__" not in f.parts and f.suffix != ".pyc"
        }
    return names


def test_the_build_names_this_version(built: dict[str, Path]) -> None:
    assert built["sdist"].name == f"writegate-{VERSION}.tar.gz"
    assert built["wheel"].name == f"writegate-{VERSION}-py3-none-any.whl"


def test_the_sdist_holds_the_package_itself_and_not_the_editable_links(
    built: dict[str, Path],
) -> None:
    with tarfile.open(built["sdist"]) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    wanted = {name.removeprefix("writegate/") for name in _package_files()}
    assert wanted <= names, sorted(wanted - names)[:10]
    assert {"pyproject.toml", "README.md", "CHANGELOG.md"} <= names
    assert not [name for name in names if name.startswith(".editable")]


def test_the_wheel_built_from_the_sdist_holds_every_file_of_the_package(
    built: dict[str, Path],
) -> None:
    with zipfile.ZipFile(built["wheel"]) as archive:
        names = {n for n in archive.namelist() if not n.split("/")[0].endswith(".dist-info")}
    assert names == _package_files()


def _run(venv: Path, *args: str, env: dict[str, str]) -> str:
    # From a folder with no project files, so only what was installed is importable.
    drop = {"PYTHONPATH", "VIRTUAL_ENV", "OPENAI_API_KEY", "OPENAI_BASE_URL", "WRITEGATE_MODEL"}
    base = {key: value for key, value in os.environ.items() if key not in drop}
    result = subprocess.run(
        [str(venv / "bin" / "writegate"), *args],
        cwd=venv,
        env={**base, **env, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.mark.parametrize("artifact", ["wheel", "sdist"])
def test_each_artifact_installs_into_a_fresh_venv_and_runs(
    artifact: str,
    built: dict[str, Path],
    create_database: Callable[[], str],
    tmp_path: Path,
) -> None:
    venv = tmp_path / "env"
    install(built[artifact], venv, extras=("langchain",))
    assert _run(venv, "--version", env={}) == f"writegate {VERSION}\n"
    out = _run(venv, "demo", env={"DATABASE_URL": create_database()})
    assert "succeeded" in out, out


def test_the_readme_installs_the_wheel_this_build_makes(built: dict[str, Path]) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Use it in your agent", 1)[1].split("```python", 1)[0]
    wheels = set(re.findall(r"writegate-[\w.]+-py3-none-any\.whl", section))
    assert wheels == {built["wheel"].name}
    assert "uv build" in section
    assert re.search(r'pip install "\./writegate\[langchain\]"', section)  # from a checkout
    published = [line for line in section.splitlines() if 'install "writegate[' in line]
    assert published and all("published" in line for line in published), published
