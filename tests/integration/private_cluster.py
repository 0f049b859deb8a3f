"""A private PostgreSQL cluster that a test may stop and start: never the shared one.

`initdb` into a temporary folder owned by the unprivileged `postgres` user (the
binaries of the newest installed major version), on a free loopback port, with its
socket in that folder. Stopping it is a real server stop (`pg_ctl -m immediate` is a
crash: the next start replays the WAL).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from contextlib import suppress
from pathlib import Path

from tests.integration.http_fixtures import free_port

OWNER = "postgres"


def available() -> str | None:
    """Why a private cluster cannot run here, or None."""
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        return "needs root and runuser to run PostgreSQL as an unprivileged user"
    if not glob.glob("/usr/lib/postgresql/*/bin/initdb"):
        return "no PostgreSQL server binaries under /usr/lib/postgresql"
    return None


class PrivateCluster:
    def __init__(self) -> None:
        self.bin = Path(sorted(glob.glob("/usr/lib/postgresql/*/bin"))[-1])
        self.root = Path(tempfile.mkdtemp(prefix="writegate-pg-"))
        shutil.chown(self.root, OWNER)
        self.data = self.root / "data"
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        command = ["runuser", "-u", OWNER, "--", str(self.bin / tool), *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
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
