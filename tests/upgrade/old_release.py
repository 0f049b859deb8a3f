"""An earlier release, built from this repository's own history, run as processes.

`release_python(release)` exports the commit's tree (`git archive`), installs it with
its own lock file (`uv sync --frozen`) into a folder under the temporary directory
keyed by the commit, and returns that environment's python; a second call reuses it.
`drive(python, url, ...)` runs `tests/upgrade/driver.py` under it against `url`.

A clone without the commit (a shallow one, an sdist) cannot run these tests: under
CI (`CI=true`) that fails the run, elsewhere the test is skipped with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.upgrade.releases import Release

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("driver.py")
CACHE = Path(tempfile.gettempdir()) / "writegate-releases"
NEW_PYTHON = sys.executable  # today's code
EXTRAS = ["--extra", "server", "--extra", "mcp", "--extra", "langchain"]


def _missing(release: Release, why: str) -> None:
    message = (
        f"the earlier release {release.commit[:7]} ({release.what}) cannot be built: {why}. "
        "The upgrade tests need the repository's full history (git clone without --depth)."
    )
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


def release_python(release: Release) -> Path:
    """The python of `release`'s own environment, built once per commit."""
    home = CACHE / release.commit
    python = home / ".venv" / "bin" / "python"
    if (home / ".built").exists() and python.exists():
        return python
    if shutil.which("git") is None or shutil.which("uv") is None:
        _missing(release, "git and uv are needed")
    found = subprocess.run(
        ["git", "cat-file", "-e", f"{release.commit}^{{commit}}"], cwd=ROOT, capture_output=True
    )
    if found.returncode != 0:
        _missing(release, "the commit is not in this clone")
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    tree = subprocess.run(
        ["git", "archive", release.commit], cwd=ROOT, capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(home)], input=tree.stdout, check=True)
    env = {
        k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT")
    }
    built = subprocess.run(
        ["uv", "sync", "--frozen", "--no-dev", "--quiet", *EXTRAS],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
    )
    if built.returncode != 0:
        raise AssertionError(f"uv sync of {release.commit[:7]} failed:\n{built.stderr}")
    (home / ".built").touch()
    return python


def drive(python: Path | str, url: str, *args: str) -> dict[str, Any]:
    """Run the driver under `python` against `url`; its JSON report."""
    done = subprocess.run(
        [str(python), str(DRIVER), *args],
        env=_env(url),
        cwd=CACHE,
        capture_output=True,
        text=True,
        timeout=180,
    )
    if done.returncode != 0:
        raise AssertionError(f"driver {' '.join(args)} under {python} failed:\n{done.stderr}")
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


class Held:
    """A driver process of a release that stays open (`driver.py hold`): it opened the
    database before whatever happens next, as a replica still running in a rolling
    release; `answer(...)` has it answer and returns its report."""

    def __init__(self, python: Path | str, url: str) -> None:
        self.proc = subprocess.Popen(
            [str(python), str(DRIVER), "hold"],
            env=_env(url),
            cwd=CACHE,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self._read().get("ready"), "the held driver did not open"

    def answer(self, *names: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(" ".join(names) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # blocks until the driver says something
        if not line:
            self.proc.wait(timeout=30)
            raise AssertionError(
                f"the held driver ended: {self.proc.stderr and self.proc.stderr.read()}"
            )
        report: dict[str, Any] = json.loads(line)
        return report

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def command(python: Path | str, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The release's own `writegate` command, run against `url`."""
    return subprocess.run(
        [str(python), "-m", "writegate", *args],
        env=_env(url),
        cwd=CACHE,
        capture_output=True,
        text=True,
        timeout=120,
    )


class Served:
    """A release's own server as a process of its own on a free loopback port:
    `writegate serve` (`kind="serve"`, ready once `/healthz` answers) or `writegate mcp
    --transport http` (`kind="mcp"`, ready once `/mcp` refuses a caller without a key)."""

    def __init__(self, python: Path | str, url: str, kind: str, **env: str) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        args = ["serve"] if kind == "serve" else ["mcp", "--transport", "http"]
        self.proc = subprocess.Popen(
            [str(python), "-m", "writegate", *args, "--port", str(self.port)],
            env={**_env(url), **env},
            cwd=CACHE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.base = f"http://127.0.0.1:{self.port}"
        self._wait(f"{self.base}/healthz" if kind == "serve" else f"{self.base}/mcp")

    def _wait(self, probe: str) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"the server ended: {self.proc.stderr and self.proc.stderr.read()}"
                )
            try:
                with urllib.request.urlopen(probe, timeout=1):
                    return
            except urllib.error.HTTPError as exc:  # the MCP endpoint answers 401 or 405
                if exc.code in (401, 405):
                    return
            except OSError:
                pass
            time.sleep(0.05)  # poll interval while the port opens, not a timing assumption
        self.close()
        raise AssertionError(f"{probe} did not come up")

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)

    def __enter__(self) -> Served:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _env(url: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    # An earlier release reads only its own tree: never the checkout under test.
    return {**keep, "DATABASE_URL": url, "NO_COLOR": "1"}
