"""A fresh venv holding a built writegate artifact, installed by uv, online or offline.

`install(artifact, where, extras=..., also=...)` makes a venv at `where` (`uv venv`),
puts in it the lock's versions of what the artifact needs (`uv export` of uv.lock as a
pylock.toml, `uv pip install -r`: from uv's cache when the project was synced, else from
the package index), then installs the artifact itself *with* its dependencies
(`uv pip install "ARTIFACT[extras]" ...`). That last step resolves the artifact's own
metadata: a requirement the lock's versions do not meet has to come from the index, and
with no network (`UV_OFFLINE`) the install fails. So the same steps pass on a machine
without a network, where the index is out of reach, and prove the wheel or sdist installs.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def uv() -> str:
    found = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    if not Path(found).exists():
        pytest.fail("uv is needed to build and install the package: pip install uv")
    return found


def run_uv(*args: str) -> str:
    done = subprocess.run([uv(), *args], capture_output=True, text=True)
    assert done.returncode == 0, f"uv {' '.join(args)}:\n{done.stdout}{done.stderr[-3000:]}"
    return done.stderr


def _closure(names: tuple[str, ...]) -> set[str]:
    """The packages uv.lock has `names` (registry packages) depend on, with them."""
    packages: dict[str, list[str]] = {}
    for package in tomllib.loads((ROOT / "uv.lock").read_text())["package"]:
        deps = packages.setdefault(package["name"], [])
        deps += [dep["name"] for dep in package.get("dependencies", [])]
    todo, seen = list(names), set()
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += packages[name]
    return seen


def _export(out: Path, *args: str) -> list[str]:
    """uv.lock as a pylock.toml (without writegate itself), split at its [[packages]]
    tables: the head, then a table per package."""
    run_uv(
        "export", "--frozen", "--quiet", "--format", "pylock.toml", "--no-emit-project",
        *args, "--project", str(ROOT), "--output-file", str(out),
    )  # fmt: skip
    return out.read_text().split(TABLE)


TABLE = "\n[[packages]]\n"


def _name(table: str) -> str:
    return str(tomllib.loads(table)["name"])


def lock_requirements(out: Path, extras: tuple[str, ...], also: tuple[str, ...]) -> Path:
    """A pylock.toml of the lock's versions: writegate's dependencies with `extras`,
    and `also` (packages the tests add, from the dev group) with theirs."""
    extra = [f"--extra={name}" for name in extras]
    head, *tables = _export(out / "pylock.toml", "--no-default-groups", *extra)
    if also:
        have, wanted = {_name(t) for t in tables}, _closure(also)
        everything = _export(out / "pylock.all.toml", "--all-groups", "--all-extras")[1:]
        more = [t for t in everything if _name(t) in wanted - have]
        assert {_name(t) for t in more} == wanted - have, sorted(wanted - have)
        tables += more
    merged = out / "pylock.wanted.toml"
    merged.write_text(TABLE.join([head, *tables]))
    return merged


def install(
    artifact: Path, where: Path, extras: tuple[str, ...] = (), also: tuple[str, ...] = ()
) -> Path:
    """A venv at `where` with `artifact[extras]` and `also` installed; its python."""
    if not (where / "bin" / "python").exists():
        run_uv("venv", "--quiet", str(where))
    python = where / "bin" / "python"
    where.parent.joinpath("lock").mkdir(exist_ok=True)
    pinned = lock_requirements(where.parent / "lock", extras, also)
    run_uv("pip", "install", "--quiet", "--python", str(python), "-r", str(pinned))
    named = f"{artifact}[{','.join(extras)}]" if extras else str(artifact)
    run_uv("pip", "install", "--quiet", "--python", str(python), named, *also)
    return python
