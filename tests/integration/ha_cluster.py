"""A private highly available PostgreSQL: pg_auto_failover's monitor, a primary and a
standby on free loopback ports in a temporary folder, never the shared server.

    cluster = HaCluster(synchronous=True).start()  # monitor, node 1 primary, node 2 standby
    url = cluster.url("writegate")         # host1,host2 ... target_session_attrs=read-write
    down = cluster.kill_primary()          # SIGKILL: its postmaster, backends, agent
    cluster.wait_promoted(down)            # the standby is the writable primary
    cluster.rejoin(down)                   # the old node back, as the standby
    cluster.remove()

Every process runs as `private_cluster.py`'s do (as root, the unprivileged `postgres` user), with
`pg_autoctl`'s configuration and state under the temporary folder. The monitor checks
the nodes every half second and calls a node unhealthy after one second, so a failover
takes seconds, not the defaults' half minute (`MONITOR_SETTINGS`).

Killing a node kills its `pg_autoctl` agent with its postmaster: pg_auto_failover's
agent restarts a postmaster that died alone, in place (crash recovery, not a failover),
so a failover needs the node gone, as when its machine dies.

`synchronous=False` makes replication asynchronous (both nodes out of the replication
quorum), and `freeze_replication()` stops the primary's WAL sender (SIGSTOP), so
whatever the primary commits afterwards never reaches the standby: promoted, the
standby has lost those commits. The old node, back, is rewound (`pg_rewind`) and
follows the new primary.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from tests.integration.http_fixtures import free_port
from tests.integration.private_cluster import as_owner, own
from tests.system_packages import missing

FAILOVER_PACKAGE = "postgresql-15-auto-failover"  # as .ci/run installs it
DEADLINE_S = 60.0
# The monitor's health checks (milliseconds), far below the defaults (5 s period, 20 s
# before a node is called unhealthy): a dead primary is noticed within about a second.
MONITOR_SETTINGS = {
    "pgautofailover.health_check_period": "500",
    "pgautofailover.health_check_timeout": "500",
    "pgautofailover.health_check_max_retries": "1",
    "pgautofailover.health_check_retry_delay": "200",
    "pgautofailover.node_considered_unhealthy_timeout": "1000",
    "pgautofailover.startup_grace_period": "1000",
    "pgautofailover.primary_demote_timeout": "2000",
}
# Every server: small (pg_autoctl sizes shared_buffers for the machine, three times),
# no fsync (only the OS could lose what a SIGKILL does not), and a standby that retries
# its WAL source every 200 ms instead of 5 s, which a promotion otherwise waits out.
SERVER_SETTINGS = {
    "shared_buffers": "'32MB'",
    "effective_cache_size": "'256MB'",
    "maintenance_work_mem": "'32MB'",
    "work_mem": "'4MB'",
    "wal_keep_size": "'256MB'",
    "max_connections": "100",
    "fsync": "off",
    "wal_retrieve_retry_interval": "'200ms'",
}
NODE_STATES_SQL = """
SELECT nodeid, nodename, nodeport, reportedstate::text AS reported, goalstate::text AS goal
FROM pgautofailover.node ORDER BY nodeid"""
WRITABLE_SQL = (
    "SELECT NOT pg_is_in_recovery() AND NOT current_setting('transaction_read_only')::bool"
)
WAL_SENDERS_SQL = "SELECT pid FROM pg_stat_replication"


def available() -> str | None:
    """Why the HA cluster cannot run here (pg_auto_failover is missing), or None."""
    if shutil.which("pg_autoctl") is None or not glob.glob(
        "/usr/lib/postgresql/*/lib/pgautofailover.so"
    ):
        return missing(FAILOVER_PACKAGE, "the HA cluster")
    return None


def wait_until(condition: Callable[[], Any], what: str, deadline_s: float = DEADLINE_S) -> Any:
    """Poll `condition` until it is truthy; fail after the deadline."""
    end = time.monotonic() + deadline_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > end:
            raise TimeoutError(f"timed out after {deadline_s} s waiting for {what}")
        time.sleep(0.05)


def _running(pid: int) -> bool:
    """Alive and not a zombie (a killed child of ours waits to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


@dataclass
class Node:
    number: int
    port: int
    data: Path
    agent: subprocess.Popen[bytes] | None = None
    log: Path = field(default=Path())

    @property
    def name(self) -> str:
        return f"node_{self.number}"

    def dsn(self, dbname: str) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname} connect_timeout=2"

    def postmaster_pid(self) -> int | None:
        """The running postmaster of this node (never a stale file's reused pid)."""
        try:
            pid = int((self.data / "postmaster.pid").read_text().split()[0])
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            return None
        return pid if str(self.data).encode() in command else None


class HaCluster:
    def __init__(self, *, synchronous: bool = True) -> None:
        self.synchronous = synchronous
        self.bin = Path(sorted(glob.glob("/usr/lib/postgresql/*/bin"))[-1])
        self.root = Path(tempfile.mkdtemp(prefix="writegate-ha-"))
        own(self.root)
        self.monitor = Node(0, free_port(), self.root / "monitor")
        self.nodes = [Node(n, free_port(), self.root / f"node{n}") for n in (1, 2)]
        self.failovers = 0

    # -- processes ----------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        home = str(self.root)
        return {
            "PATH": f"{self.bin}:/usr/bin:/bin",
            "HOME": home,
            "XDG_CONFIG_HOME": f"{home}/config",
            "XDG_DATA_HOME": f"{home}/share",
            "XDG_RUNTIME_DIR": f"{home}/run",
            "PGHOST": "127.0.0.1",
            "LC_ALL": "C.UTF-8",  # initdb: UTF8 databases, as writegate expects
        }

    def _autoctl(self, *args: str) -> str:
        done = subprocess.run(
            ["pg_autoctl", *args],
            env=self._env(),
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=DEADLINE_S,
            **as_owner(),
        )
        if done.returncode != 0:
            raise RuntimeError(f"pg_autoctl {args[0:2]} failed: {done.stderr[-3000:]}")
        return done.stdout

    def _run_agent(self, node: Node) -> None:
        """`pg_autoctl run` for the node, in a process group of its own."""
        node.log = self.root / f"{node.data.name}.log"
        with node.log.open("ab") as log:
            node.agent = subprocess.Popen(
                ["pg_autoctl", "run", "--pgdata", str(node.data)],
                env=self._env(),
                cwd=self.root,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **as_owner(),
            )

    @staticmethod
    def _append_settings(data: Path, settings: dict[str, str]) -> None:
        # postgresql.conf includes pg_autoctl's files first: what is appended wins.
        with (data / "postgresql.conf").open("a") as conf:
            conf.write("\n# writegate's HA test harness\n")
            conf.writelines(f"{k} = {v}\n" for k, v in settings.items())

    def monitor_uri(self) -> str:
        return f"postgres://autoctl_node@127.0.0.1:{self.monitor.port}/pg_auto_failover"

    def start(self) -> HaCluster:
        """The monitor, node 1 (the primary), then node 2 (its standby), all healthy."""
        common = ["--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl"]
        common += ["--pgctl", str(self.bin / "pg_ctl")]
        self._autoctl("create", "monitor", "--pgdata", str(self.monitor.data),
                      "--pgport", str(self.monitor.port), *common)  # fmt: skip
        self._autoctl("config", "set", "--pgdata", str(self.monitor.data),
                      "postgresql.listen_addresses", "127.0.0.1")  # fmt: skip
        self._append_settings(self.monitor.data, {**SERVER_SETTINGS, **MONITOR_SETTINGS})
        self._run_agent(self.monitor)
        wait_until(self._monitor_answers, "the monitor")
        for node in self.nodes:
            self._autoctl(
                "create", "postgres", "--pgdata", str(node.data), "--pgport", str(node.port),
                "--listen", "127.0.0.1", "--name", node.name, "--dbname", "postgres",
                "--monitor", self.monitor_uri(),
                "--replication-quorum", "true" if self.synchronous else "false",
                *common,
            )  # fmt: skip
            if node.number == 1:  # the standby copies it with the base backup
                self._append_settings(node.data, SERVER_SETTINGS)
            self._run_agent(node)
            wait_until(lambda n=node: self._state(n) in ("single", "primary", "secondary"),
                       f"{node.name} to join")  # fmt: skip
        self.wait_healthy()
        return self

    def _monitor_answers(self) -> bool:
        try:
            with psycopg.connect(self.monitor_uri(), connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def states(self) -> dict[str, tuple[str, str]]:
        """Each node's (reported, assigned) state, as the monitor has them."""
        # The monitor's database is SQL_ASCII: ask for text in UTF-8, not bytes.
        with psycopg.connect(self.monitor_uri(), connect_timeout=2, client_encoding="utf8") as conn:
            rows = conn.execute(NODE_STATES_SQL).fetchall()
        return {str(r[1]): (str(r[3]), str(r[4])) for r in rows}

    def _state(self, node: Node) -> str:
        reported, goal = self.states().get(node.name, ("", "-"))
        return reported if reported == goal else ""

    def wait_healthy(self, deadline_s: float = DEADLINE_S) -> None:
        """Both nodes settled: one primary, one secondary."""
        try:
            wait_until(
                lambda: sorted(self._state(n) for n in self.nodes) == ["primary", "secondary"],
                "a primary and a secondary",
                deadline_s,
            )
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}: {self.states()}\n{self.logs()}") from None

    def logs(self, lines: int = 15) -> str:
        """The last lines of each agent's log, for a failure message."""
        out = []
        for node in (self.monitor, *self.nodes):
            server_logs = sorted((node.data / "log").glob("*.log"))
            for path in [node.log, *server_logs[-1:], node.data / "startup.log"]:
                with suppress(OSError):
                    text = path.read_text(errors="replace").splitlines()[-lines:]
                    out.append(f"-- {path}\n" + "\n".join(text))
        return "\n".join(out)

    # -- the URL --------------------------------------------------------------------------

    def url(self, dbname: str = "postgres") -> str:
        """The multi-host URL writegate is given: libpq tries each host and keeps the one
        that takes writes."""
        hosts = ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)
        return f"postgresql://postgres@{hosts}/{dbname}?target_session_attrs=read-write"

    def create_database(self, dbname: str) -> str:
        with psycopg.connect(self.url(), autocommit=True, connect_timeout=5) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
        return self.url(dbname)

    # -- faults ---------------------------------------------------------------------------

    def primary(self) -> Node:
        return wait_until(
            lambda: next((n for n in self.nodes if self._writable(n)), None), "a writable primary"
        )

    @staticmethod
    def _writable(node: Node) -> bool:
        try:
            with psycopg.connect(node.dsn("postgres"), autocommit=True) as conn:
                row = conn.execute(WRITABLE_SQL).fetchone()
        except psycopg.OperationalError:
            return False
        return bool(row and row[0])

    def standby(self, of: Node) -> Node:
        return next(n for n in self.nodes if n is not of)

    def freeze_replication(self) -> int:
        """SIGSTOP the primary's WAL senders: from now on its commits stay on it alone.
        Returns how many senders were stopped."""
        primary = self.primary()
        with psycopg.connect(primary.dsn("postgres"), autocommit=True) as conn:
            pids = [int(r[0]) for r in conn.execute(WAL_SENDERS_SQL).fetchall()]
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        return len(pids)

    def kill_primary(self) -> Node:
        """SIGKILL the writable node: its agent, its postmaster and every backend."""
        node = self.primary()
        self.kill(node)
        return node

    def kill(self, node: Node) -> None:
        pid = node.postmaster_pid()
        doomed: list[int] = []
        if pid is not None:
            # Backends run in sessions of their own: stop the postmaster (no more forks),
            # list its children, then kill them all. One left alive would hold the old
            # shared memory, and the node could not start again.
            with suppress(OSError):
                os.kill(pid, signal.SIGSTOP)
                children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
                doomed = [pid, *map(int, children)]
        if node.agent is not None:  # the postmaster is in its group: after the list
            with suppress(ProcessLookupError):
                os.killpg(node.agent.pid, signal.SIGKILL)
        for each in doomed:
            with suppress(ProcessLookupError):
                os.kill(each, signal.SIGKILL)
        if node.agent is not None:
            node.agent.wait(timeout=DEADLINE_S)
        for each in doomed:
            wait_until(lambda p=each: not _running(p), f"{node.name}'s process {each} to die")

    def wait_promoted(self, old: Node, deadline_s: float = DEADLINE_S) -> Node:
        """The other node takes writes (the monitor promoted it); returns it."""
        new = self.standby(old)
        wait_until(lambda: self._writable(new), f"{new.name} to be promoted", deadline_s)
        self.failovers += 1
        return new

    def rejoin(self, node: Node, deadline_s: float = DEADLINE_S) -> None:
        """Start the node's agent again: it is demoted, rewound and follows the primary."""
        # The killed postmaster's pid file stays behind, as after a crash; pg_autoctl
        # stalls on it when the pid has been reused meanwhile, so it goes, as at a reboot.
        (node.data / "postmaster.pid").unlink(missing_ok=True)
        self._run_agent(node)
        self.wait_healthy(deadline_s)

    def remove(self) -> None:
        """Kill every process of the cluster (a temporary one: nothing to shut down
        gently, and a WAL sender stopped by `freeze_replication` would hold a clean
        shutdown forever), then delete its folder."""
        for node in (*self.nodes, self.monitor):
            if node.postmaster_pid() is not None or node.agent is not None:
                self.kill(node)
        shutil.rmtree(self.root, ignore_errors=True)
