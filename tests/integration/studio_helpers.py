"""`langgraph dev` as a test fixture: the repo's graph served offline on a free port.

The server runs as its own process group in a scratch folder that links the repo's real
`demo/`, `examples/` and a config file (the server resolves graph paths against its working
directory and keeps its in-memory state in `.langgraph_api/` there), so nothing is
written into the repository. Readiness is polled on `/ok` with a deadline.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.http_fixtures import free_port

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 60.0
# The server's checkpointer in the run's database (`langgraph dev` config), instead of its memory.
POSTGRES_CHECKPOINTER = {"path": "./demo/studio.py:postgres_checkpointer"}


def _wait_until_ready(base_url: str, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(
                f"langgraph dev exited with {server.returncode}:\n{log.read_text()[-4000:]}"
            )
        try:
            if httpx.get(f"{base_url}/ok", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass  # not listening yet
        time.sleep(0.1)  # poll interval, not a wait for a state
    pytest.fail(f"langgraph dev not ready in {READY_TIMEOUT_S:.0f} s:\n{log.read_text()[-4000:]}")


def _stop(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)  # the group we started: server and its workers
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=15)


@contextmanager
def langgraph_dev(
    workdir: Path,
    database_url: str,
    extra_config: dict[str, Any] | None = None,
    config_file: str = "langgraph.json",
) -> Iterator[str]:
    """Run `langgraph dev` for the repo's `config_file` (plus `extra_config` keys) in
    `workdir`, offline, against `database_url`; yield its base URL once it answers."""
    for folder in ("demo", "examples"):
        (workdir / folder).symlink_to(REPO / folder, target_is_directory=True)
    config = workdir / config_file
    if extra_config:
        spec = json.loads((REPO / config_file).read_text())
        config.write_text(json.dumps({**spec, **extra_config}))
    else:
        config.symlink_to(REPO / config_file)

    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "WRITEGATE_"))}
    env |= {
        "DATABASE_URL": database_url,
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        "LANGGRAPH_NO_VERSION_CHECK": "true",
        "LANGSMITH_TRACING": "false",
    }
    port = free_port()
    langgraph = Path(sys.executable).parent / "langgraph"
    command = [str(langgraph), "dev", "--no-browser", "--no-reload"]
    command += ["--host", "127.0.0.1", "--port", str(port), "--config", str(config)]
    log = workdir / "server.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            command, cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    try:
        base_url = f"http://127.0.0.1:{port}"
        _wait_until_ready(base_url, server, log)
        yield base_url
    finally:
        _stop(server)
