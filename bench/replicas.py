"""Throughput with 1, 2 and 4 `writegate serve` replicas and 1, 2 and 4 reconcilers on
one PostgreSQL, and what saturates: CPU, locks or commits.

    uv run python -m writegate.bench.replicas --seconds 15
    uv run python -m writegate.bench.replicas --reconcilers-only --backlog 10000

Approvals: clients post a refund request (a thread, a message, a proposal) round-robin
over the replicas. Confirmed writes: the clients confirm those proposals (each one
executes a refund at the in-process provider). Reconcilers: a backlog of `--backlog`
unknown outcomes, cloned from one executed refund (`bench/backlog.py`; a share `--seen`
of the keys the provider applied, the rest it never saw), is settled by R
`writegate reconcile --loop` processes, then every row is checked; the levels run
interleaved (`--reconciler-levels 1,2,4,4,2,1`) and are summed up by their medians,
since the machine is shared. While each phase runs, the CPU use (the machine's, and the
reconcilers' and their PostgreSQL backends' own), the sessions waiting on a lock and
the commits per second are sampled. Writes to a throwaway database.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import psycopg

from writegate.bench.backlog import check, make_backlog
from writegate.checkpoints.namespace import DEFAULT_SCHEMA, sql_for
from writegate.checkpoints.ops_sql import OpsSQL
from writegate.demo.schema import setup_demo
from writegate.demo.seed import seed_demo
from writegate.surfaces.store import setup_service
from writegate.surfaces.store.keys import create_key
from writegate.testing import database as throwaway

TENANT, USER = "tenant_hz", "user_42"
ORDER_SQL = """
INSERT INTO orders (order_id, tenant_id, user_id, currency, payable_minor)
VALUES (%s, %s, %s, 'CNY', 50000)"""
# The open executions per tool and status, as `writegate stats` reads them; the backlog
# is open while any is `unknown` or `running`.
OPEN_SQL = sql_for(OpsSQL, DEFAULT_SCHEMA).OPEN_EXECUTIONS_SQL
STILL_OPEN = {"unknown", "running"}
LOCK_WAITS_SQL = """
SELECT count(*) FILTER (WHERE wait_event_type = 'Lock'),
       count(*) FILTER (WHERE state = 'active')
FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"""
COMMITS_SQL = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


BACKENDS_SQL = """
SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"""


def _process_ticks(pids: list[int]) -> dict[int, int]:
    """User + system CPU ticks of each process still alive."""
    out = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[pid] = int(fields[11]) + int(fields[12])
    return out


def _backends(url: str) -> list[int]:
    with psycopg.connect(url, autocommit=True) as conn:
        return [int(row[0]) for row in conn.execute(BACKENDS_SQL).fetchall()]


def _cores(before: dict[int, int], after: dict[int, int], seconds: float) -> float:
    """CPU cores used over `seconds` by the processes seen at both ends."""
    ticks = sum(after[pid] - before[pid] for pid in after if pid in before)
    return round(ticks / os.sysconf("SC_CLK_TCK") / seconds, 2)


def _cpu() -> tuple[int, int]:
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


class Sampler:
    """CPU busy %, sessions waiting on locks, commits per second, over one phase."""

    def __init__(self, url: str) -> None:
        self.url, self.stop, self.samples = url, threading.Event(), [0, 0, 0]

    def _run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self.stop.wait(0.25):
                row = conn.execute(LOCK_WAITS_SQL).fetchone()
                assert row is not None
                self.samples[0] += 1
                self.samples[1] += row[0]
                self.samples[2] += row[1]

    @contextmanager
    def phase(self, out: dict[str, Any]) -> Iterator[None]:
        with psycopg.connect(self.url, autocommit=True) as conn:
            commits0 = conn.execute(COMMITS_SQL).fetchone()[0]  # type: ignore[index]
        busy0, total0 = _cpu()
        started = time.perf_counter()
        self.stop.clear()
        self.samples = [0, 0, 0]
        thread = threading.Thread(target=self._run, daemon=True)
        thread.start()
        yield
        self.stop.set()
        thread.join()
        seconds = time.perf_counter() - started
        busy1, total1 = _cpu()
        with psycopg.connect(self.url, autocommit=True) as conn:
            commits1 = conn.execute(COMMITS_SQL).fetchone()[0]  # type: ignore[index]
        n = max(self.samples[0], 1)
        out.update(
            cpu_busy_pct=round(100 * (busy1 - busy0) / max(total1 - total0, 1), 1),
            lock_waiting_sessions=round(self.samples[1] / n, 2),
            active_sessions=round(self.samples[2] / n, 2),
            commits_per_s=round((commits1 - commits0) / seconds, 1),
        )


def child_env() -> dict[str, str]:
    """This environment without OPENAI_*: the replicas run the scripted demo model, which
    is what proposes the clients' refunds."""
    return {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}


def _spawn(args: list[str], url: str, env: dict[str, str] | None = None) -> subprocess.Popen[Any]:
    own = child_env()
    return subprocess.Popen(
        [sys.executable, "-m", "writegate", *args],
        env={**own, "DATABASE_URL": url, **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def start_replicas(url: str, n: int, env: dict[str, str] | None = None) -> list[Any]:
    replicas = []
    for _ in range(n):
        port = _free_port()
        cmd = ["serve", "--port", str(port), "--log-level", "warning"]
        replicas.append((_spawn(cmd, url, env), f"http://127.0.0.1:{port}"))
    deadline = time.monotonic() + 180
    for proc, base in replicas:
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("a replica did not start")
            try:
                if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
    return replicas


def stop(procs: list[subprocess.Popen[Any]]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.wait(timeout=30)


def run_clients(clients: int, seconds: float, work: Callable[[int, int], bool]) -> float:
    """`clients` threads call work(client, i) until time is up; completed per second."""
    done = [0] * clients
    end = time.monotonic() + seconds

    def loop(c: int) -> None:
        i = 0
        while time.monotonic() < end:
            if work(c, i):
                done[c] += 1
            i += 1

    threads = [threading.Thread(target=loop, args=(c,)) for c in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done) / (time.perf_counter() - started)


def replica_level(url: str, key: str, n: int, seconds: float, clients: int) -> dict[str, Any]:
    replicas = start_replicas(url, n)
    bases = [base for _, base in replicas]
    who = {"Authorization": "Bearer " + key}
    pending: list[str] = []
    lock = threading.Lock()
    http = [httpx.Client(timeout=60) for _ in range(clients)]
    order_conn = [psycopg.connect(url, autocommit=True) for _ in range(clients)]
    out: dict[str, Any] = {"replicas": n, "clients": clients}
    sampler = Sampler(url)

    def propose(c: int, i: int) -> bool:
        base = bases[(c + i) % n]
        order = "ord_b" + secrets.token_hex(5)
        order_conn[c].execute(ORDER_SQL, (order, TENANT, USER))
        thread = http[c].post(f"{base}/v1/threads", headers=who).json()["thread_id"]
        text = f"refund 10.00 CNY of {order} because it arrived broken"
        reply = http[c].post(
            f"{base}/v1/threads/{thread}/messages", headers=who, json={"content": text}
        )
        found = '"awaiting_approval"' in reply.text
        if found:
            proposal = json.loads(reply.text.rsplit("data: ", 1)[1])["pending"][0]["proposal_id"]
            with lock:
                pending.append(proposal)
        return found

    def confirm(c: int, i: int) -> bool:
        with lock:
            if not pending:
                return False
            proposal = pending.pop()
        answer = http[c].post(
            f"{bases[(c + i) % n]}/v1/approvals/{proposal}/decision",
            headers={**who, "Idempotency-Key": f"b-{proposal}"},
            json={"action": "confirm"},
        )
        return answer.status_code == 200 and answer.json().get("outcome") == "executed"

    try:
        approvals: dict[str, Any] = {}
        with sampler.phase(approvals):
            approvals["per_s"] = round(run_clients(clients, seconds, propose), 1)
        writes: dict[str, Any] = {}
        with sampler.phase(writes):
            writes["per_s"] = round(run_clients(clients, seconds, confirm), 1)
        out.update(approvals=approvals, confirmed_writes=writes)
    finally:
        for client in http:
            client.close()
        for conn in order_conn:
            conn.close()
        stop([proc for proc, _ in replicas])
    return out


def reconciler_level(url: str, n: int, backlog: int, seen: float = 0.5) -> dict[str, Any]:
    """`backlog` unknown outcomes cloned from an executed refund (`bench/backlog.py`; a
    share `seen` of the keys the provider applied, the rest it never saw), settled by n
    `writegate reconcile --loop` processes; then every row is checked."""
    made = make_backlog(url, backlog, seen)
    out: dict[str, Any] = {"reconcilers": n, "backlog": made.size, "provider_had": made.seen}
    sampler = Sampler(url)

    def open_count() -> int:
        with psycopg.connect(url, autocommit=True) as conn:
            rows = conn.execute(OPEN_SQL).fetchall()
        return sum(int(count) for _, status, count in rows if status in STILL_OPEN)

    args = ["reconcile", "--loop", "--interval", "0.1", "--batch", "20"]
    procs = [_spawn(args, url) for _ in range(n)]
    try:
        deadline = time.monotonic() + 180
        own = [proc.pid for proc in procs]
        # Processes still starting are not counted: the phase starts at the last look
        # that found nothing settled yet. (Started after the first look that found
        # something settled, it missed whatever was settled by then: a backlog small
        # enough for one batch could be gone before it began.) The CPU split starts once
        # the reconcilers' sessions exist, after that look.
        started = look = time.perf_counter()
        while made.size and open_count() == made.size and time.monotonic() < deadline:
            started = look  # nothing was settled yet when it was taken
            time.sleep(0.05)
            look = time.perf_counter()
        backends = _backends(url)
        ticks0 = _process_ticks(own), _process_ticks(backends)
        first = made.size
        phase: dict[str, Any] = {}
        with sampler.phase(phase):
            while (left := open_count()) > 0 and time.perf_counter() - started < 900:
                time.sleep(0.1)
        seconds = time.perf_counter() - started
        # Split of the CPU: the reconciler processes, and this database's PostgreSQL
        # backends (the reconcilers' pooled sessions; the sampler's and the polling
        # connections are short and not counted).
        phase["reconciler_cores"] = _cores(ticks0[0], _process_ticks(own), seconds)
        phase["postgres_cores"] = _cores(ticks0[1], _process_ticks(backends), seconds)
        phase["seconds"] = round(seconds, 2)
        phase["settled_per_s"] = round((first - left) / seconds, 1)
        phase["commits_per_settled"] = round(
            phase["commits_per_s"] / max(phase["settled_per_s"], 0.1), 1
        )
        out.update(phase)
    finally:
        stop(procs)
    out["check"] = check(url, made)
    return out


def one_refund(url: str, key: str) -> None:
    """One refund proposed and confirmed over HTTP: the template the backlog is cloned from."""
    replicas = start_replicas(url, 1)
    base, who = replicas[0][1], {"Authorization": "Bearer " + key}
    try:
        with psycopg.connect(url, autocommit=True) as conn, httpx.Client(timeout=60) as http:
            order = "ord_b" + secrets.token_hex(5)
            conn.execute(ORDER_SQL, (order, TENANT, USER))
            thread = http.post(f"{base}/v1/threads", headers=who).json()["thread_id"]
            text = f"refund 10.00 CNY of {order} because it arrived broken"
            reply = http.post(
                f"{base}/v1/threads/{thread}/messages", headers=who, json={"content": text}
            )
            proposal = json.loads(reply.text.rsplit("data: ", 1)[1])["pending"][0]["proposal_id"]
            answer = http.post(
                f"{base}/v1/approvals/{proposal}/decision",
                headers={**who, "Idempotency-Key": f"b-{proposal}"},
                json={"action": "confirm"},
            )
            if answer.json().get("outcome") != "executed":
                raise RuntimeError(f"the template refund did not execute: {answer.text}")
    finally:
        stop([proc for proc, _ in replicas])


def _medians(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    keys = ("settled_per_s", "cpu_busy_pct", "lock_waiting_sessions", "active_sessions",
            "commits_per_s", "commits_per_settled", "reconciler_cores",
            "postgres_cores")  # fmt: skip
    out = []
    for n in sorted({r["reconcilers"] for r in rows}):
        runs = [r for r in rows if r["reconcilers"] == n]
        med = {k: round(statistics.median(r[k] for r in runs), 2) for k in keys}
        out.append({"reconcilers": n, "runs": len(runs), **med})
    return out


def run(
    seconds: float,
    clients: int,
    backlog: int,
    levels: tuple[int, ...] = (1, 2, 4),
    reconciler_levels: tuple[int, ...] = (1, 2, 4, 4, 2, 1),
    *,
    reconcilers_only: bool = False,
    seen: float = 0.5,
) -> dict[str, Any]:
    server = throwaway.server_url()
    url = throwaway.create_database(server, "writegate_bench_replicas")
    try:
        setup_demo(url)
        setup_service(url)
        with psycopg.connect(url, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
            seed_demo(conn)
            key = create_key(conn, USER, TENANT).secret
        out: dict[str, Any] = {"load_average_at_start": list(os.getloadavg())}
        if reconcilers_only:
            one_refund(url, key)
        else:
            out["replicas"] = [replica_level(url, key, n, seconds, clients) for n in levels]
        runs = [reconciler_level(url, n, backlog, seen) for n in reconciler_levels]
        out.update(reconcilers=runs, reconciler_medians=_medians(runs))
        out["every_backlog_settled_correctly"] = all(r["check"]["ok"] for r in runs)
        return out
    finally:
        throwaway.drop_database(server, url)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--backlog", type=int, default=5000, help="unknown outcomes per run")
    parser.add_argument("--seen", type=float, default=0.5, help="share the provider applied")
    parser.add_argument("--levels", default="1,2,4", help="replicas")
    parser.add_argument("--reconciler-levels", default="1,2,4,4,2,1")
    parser.add_argument("--reconcilers-only", action="store_true")
    args = parser.parse_args(argv)
    levels = tuple(int(x) for x in args.levels.split(","))
    rec_levels = tuple(int(x) for x in args.reconciler_levels.split(","))
    result = run(
        args.seconds, args.clients, args.backlog, levels, rec_levels,
        reconcilers_only=args.reconcilers_only, seen=args.seen,
    )  # fmt: skip
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
