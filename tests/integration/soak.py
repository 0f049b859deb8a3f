"""A randomized kill soak: refunds through two `writegate serve` replicas and two
`writegate reconcile --loop` processes that SIGKILL themselves at random step
boundaries (`WRITEGATE_FAULT_KILL_AT`, surfaces/step_kill.py), and a provider process
that is SIGKILLed at random moments, mid-request or not.

    uv run python -m tests.integration.soak --operations 200 --seed 7
    WRITEGATE_SOAK_OPS=200 WRITEGATE_SOAK_SEED=7 uv run python -m tests.integration.soak

Each operation: a fresh order, a thread, a message (a proposal), then a person's click
with an Idempotency-Key: confirm, or now and then decline. If the replica dies under
the click, the same click goes to the other one. Every dead process is restarted at
once, armed at the step killed least so far; a killed provider is restarted at once,
on the same port. Leases are 2 s and a failed lookup is repeated after 1 s (doubled per
check, `--backoff`), so what a kill orphans is settled within seconds. The soak runs at
least the operations asked for, and on until every point was killed `min_kills` times.

Then everyone is disarmed, the reconcilers settle what is left, and every operation is
checked against the provider's own table: a confirmed one has exactly one effect and a
ledger entry that agrees with it (`ledger_check`), a declined one has none. It prints:

    operations N, kills K (per point ...), effects N, duplicates 0, lost 0, seed S

Cheap kills: the processes are the real `writegate` commands, but forked from a
process that has already imported writegate (a multiprocessing forkserver with the
imports preloaded, like a pre-forking server), so a restart costs a few tenths of a
second instead of the four seconds of imports. Every wait has a deadline; a failure
says what it waited for, with the seed.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import httpx
import psycopg

from tests.app_db import setup_app
from tests.integration.fault_scripts.harness import ledger_check
from tests.integration.ha_cluster import wait_until
from tests.integration.http_fixtures import TENANT, free_port, make_key, new_order, sse_events
from writegate.checkpoints.pool import open_pool
from writegate.demo.seed import seed_demo
from writegate.testing import database as throwaway

SERVE_POINTS = ("serve:claimed", "serve:downstream_returned", "serve:recorded")
RECONCILE_POINTS = (
    "reconcile:claimed",
    "reconcile:looked_up",
    "reconcile:downstream_returned",
    "reconcile:recorded",
)
PROVIDER = "provider"
POINTS = (*SERVE_POINTS, *RECONCILE_POINTS, PROVIDER)
SEED_ENV, OPS_ENV = "WRITEGATE_SOAK_SEED", "WRITEGATE_SOAK_OPS"

LEASE_S = 2.0  # executions orphaned by a killed process are due this soon
THREAD_LEASE_S = 5.0  # threads whose run a kill cut short are free again this soon
CALL_TIMEOUT_S = 1.5  # the deadline per call: within the lease, past the provider's stall
BACKOFF_S = 1.0  # a lookup that failed (the provider was down) is repeated this soon
READY_S = 60.0  # a (re)started process answers within this
CLICK_TIMEOUT = httpx.Timeout(30.0, connect=5.0)
PROPOSE_TIMEOUT = httpx.Timeout(30.0, connect=5.0)
PROPOSE_S = 60.0  # a turn ends within this, keep-alive pings or not
SETTLE_S = 120.0
DECLINE_ONE_IN = 10
PROVIDER_KILL_ONE_IN = 8
# Imported once by the forkserver; every writegate process is forked from it.
PRELOAD = [
    "writegate.__main__",
    "writegate.surfaces.web",
    "writegate.runtime.wiring",
    "writegate.demo.provider_http",
    "uvicorn",
]
LEASE_FREE_SQL = """
SELECT coalesce(bool_and(expires_at <= now()), true) FROM writegate.thread_leases
WHERE thread_id = %s"""
OPEN_SQL = """
SELECT count(*) FROM writegate.executions
WHERE status IN ('running', 'unknown', 'failed_retryable')"""
UNSETTLED_SQL = """
SELECT request_key, status, checks, escalation FROM writegate.executions
WHERE status <> 'succeeded'"""
EFFECTS_SQL = """
SELECT o.order_id, count(r.idempotency_key) AS effects
FROM orders o LEFT JOIN provider.refunds r ON r.order_id = o.order_id
WHERE o.order_id = ANY(%s) GROUP BY o.order_id"""


class SoakFailed(AssertionError):
    pass


def post_within(url: str, headers: dict[str, str], body: Any, deadline_s: float) -> str:
    """POST and read the whole answer within `deadline_s` of wall time. A read timeout
    alone never ends an event stream whose keep-alive pings keep coming."""
    end = time.monotonic() + deadline_s
    chunks: list[bytes] = []
    with httpx.stream("POST", url, headers=headers, json=body, timeout=PROPOSE_TIMEOUT) as r:
        for chunk in r.iter_bytes():
            chunks.append(chunk)
            if time.monotonic() > end:
                raise SoakFailed(f"{url} still streaming after {deadline_s} s: {chunks[-3:]}")
    return b"".join(chunks).decode(errors="replace")


def _writegate(argv: list[str], env: dict[str, str], log_path: str) -> None:
    """In a forked child: run `writegate ARGV` with ENV, output to LOG_PATH."""
    out = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(out, 1)
    os.dup2(out, 2)
    for name in [n for n in os.environ if n.startswith("OPENAI_")]:
        del os.environ[name]  # the scripted model: no network, same answers
    os.environ.update(env)
    sys.argv = ["writegate", *argv]
    from writegate.__main__ import main

    main()


@dataclass
class Proc:
    """One `writegate` process: a replica, a reconciler or the provider."""

    kind: str  # "serve", "reconcile" or "provider"
    process: BaseProcess
    log: Path
    point: str = ""  # the step it is armed to die at ("" = unarmed)
    url: str = ""
    killed_by_us: bool = False

    def alive(self) -> bool:
        return self.process.is_alive()

    def output(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def kill(self) -> None:
        if self.alive():
            self.killed_by_us = True
            self.process.kill()
        self.process.join(timeout=READY_S)
        if self.process.exitcode is None:
            raise SoakFailed(f"{self.kind} process {self.process.pid} outlived SIGKILL")

    def wait_ready(self, deadline_s: float = READY_S) -> bool:
        """True once /healthz answers; False if the process died first."""
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            if not self.alive():
                return False
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(0.02)
        raise SoakFailed(f"{self.kind} on {self.url} not ready in {deadline_s} s: {self.output()}")


class Launcher:
    """Starts `writegate` commands forked from a process with writegate imported."""

    def __init__(self) -> None:
        self.ctx = multiprocessing.get_context("forkserver")
        self.ctx.set_forkserver_preload(PRELOAD)
        self.dir = Path(tempfile.mkdtemp(prefix="writegate-soak-"))
        self.started = 0

    def start(self, kind: str, argv: list[str], env: dict[str, str]) -> Proc:
        self.started += 1
        log = self.dir / f"{self.started:04d}-{kind}.log"
        # By its module's name, also when this file runs as __main__.
        from tests.integration.soak import _writegate as target

        process = self.ctx.Process(target=target, args=(argv, env, str(log)), daemon=True)
        process.start()
        return Proc(kind, process, log)

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


@dataclass
class Op:
    order: str
    action: str  # "confirm" or "decline"


@dataclass
class Figures:
    operations: int = 0
    kills: Counter[str] = field(default_factory=Counter)
    check: dict[str, int] = field(default_factory=dict)
    confirmed: int = 0
    declined: int = 0
    declined_effects: int = 0
    restarts: int = 0
    seconds: float = 0.0
    settle_seconds: float = 0.0
    phases: Counter[str] = field(default_factory=Counter)  # seconds spent in each
    unsettled: list[str] = field(default_factory=list)  # what is not `succeeded`, and why

    def kill_line(self) -> str:
        per = ", ".join(f"{p} {self.kills[p]}" for p in POINTS)
        return f"operations {self.operations}, kills {sum(self.kills.values())} (per point {per})"

    def line(self, seed: int) -> str:
        return (
            f"{self.kill_line()}, "
            f"effects {self.check.get('effects', 0)}, duplicates {self.check.get('duplicates', 0)}"
            f", lost {self.check.get('lost', 0)}, seed {seed}"
        )

    def details(self) -> str:
        return (
            f"confirmed {self.confirmed}, declined {self.declined} (effects for declined "
            f"{self.declined_effects}), process restarts {self.restarts}, "
            f"escalated or open {self.check.get('not_settled', 0)}, wall time {self.seconds:.0f} s "
            f"(settling at the end {self.settle_seconds:.0f} s; "
            + ", ".join(f"{k} {v:.0f} s" for k, v in sorted(self.phases.items()))
            + ")"
            + "".join(f"\n  not settled: {u}" for u in self.unsettled)
        )

    def failures(self, min_kills: int) -> list[str]:
        out = [f"{k} {self.check.get(k)}" for k in ("duplicates", "lost") if self.check.get(k)]
        if self.declined_effects:
            out.append(f"effects for declined operations {self.declined_effects}")
        if self.check.get("approved") != self.confirmed:
            out.append(f"executions {self.check.get('approved')} != confirmed {self.confirmed}")
        short = [p for p in POINTS if self.kills[p] < min_kills]
        out += [f"{p} killed {self.kills[p]} < {min_kills}" for p in short]
        return out


class Soak:
    def __init__(
        self,
        url: str,
        seed: int,
        operations: int,
        min_kills: int,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.progress = progress or (lambda line: None)
        self.url, self.seed, self.operations = url, seed, operations
        self.min_kills = min_kills
        # An armed replica dies at its N-th pass, N at random up to this: a small soak
        # kills at nearly every click, a full one lets more clicks through.
        self.serve_nth = 2 if min_kills <= 1 else 3
        self.rng = random.Random(seed)
        self.figures = Figures()
        self.launcher = Launcher()
        self.provider_port = free_port()
        self.provider: Proc | None = None
        self.replicas: list[Proc | None] = [None, None]
        self.reconcilers: list[Proc | None] = [None, None]
        self.ops: list[Op] = []
        self.armed = True
        self.lock = threading.RLock()

    # -- processes -------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        return {
            "DATABASE_URL": self.url,
            "WRITEGATE_PROVIDER_URL": f"http://127.0.0.1:{self.provider_port}",
            "WRITEGATE_EXECUTION_LEASE_SECONDS": str(LEASE_S),
            "WRITEGATE_CALL_TIMEOUT_SECONDS": str(CALL_TIMEOUT_S),
            # A replica killed mid-run holds its thread this long (its clicks: in_progress).
            "WRITEGATE_THREAD_LEASE_SECONDS": str(THREAD_LEASE_S),
        }

    def _arm(self, points: tuple[str, ...], nth_max: int, env: dict[str, str]) -> str:
        """Arm at the point killed least so far (counting the armed ones), at random."""
        if not self.armed:
            return ""
        pending = Counter(p.point for p in self._all() if p.point and p.alive())
        load = {p: self.figures.kills[p] + pending[p] for p in points}
        least = min(load.values())
        point = self.rng.choice([p for p in points if load[p] == least])
        env["WRITEGATE_FAULT_KILL_AT"] = f"{point.split(':')[1]}@{self.rng.randint(1, nth_max)}"
        return point

    def _all(self) -> list[Proc]:
        return [p for p in (*self.replicas, *self.reconcilers, self.provider) if p is not None]

    def _start_replica(self) -> Proc:
        env, port = self._env(), free_port()
        point = self._arm(SERVE_POINTS, self.serve_nth, env)
        argv = ["serve", "--port", str(port), "--log-level", "warning"]
        proc = self.launcher.start("serve", argv, env)
        proc.point, proc.url = point, f"http://127.0.0.1:{port}"
        return proc

    def _start_reconciler(self) -> Proc:
        env = self._env()
        point = self._arm(RECONCILE_POINTS, 1, env)
        argv = ["reconcile", "--loop", "--interval", "0.2", "--lease", str(LEASE_S)]
        argv += ["--backoff", str(BACKOFF_S)]
        proc = self.launcher.start("reconcile", argv, env)
        proc.point = point
        return proc

    def _start_provider(self) -> Proc:
        argv = ["provider", "serve", "--port", str(self.provider_port), "--stall", "1.0"]
        proc = self.launcher.start("provider", argv, {"DATABASE_URL": self.url})
        proc.url = f"http://127.0.0.1:{self.provider_port}"
        return proc

    def _reap(self, proc: Proc | None) -> bool:
        """True if `proc` must be (re)started; counts how a dead one died."""
        if proc is None:
            return True
        if proc.alive():
            return False
        proc.process.join(timeout=READY_S)
        self.figures.restarts += 1
        output = proc.output()
        if proc.point and f"killed at {proc.point.split(':')[1]}" in output:
            self.figures.kills[proc.point] += 1
        elif not proc.killed_by_us:
            raise SoakFailed(
                f"a {proc.kind} process died on its own (exit {proc.process.exitcode}): {output}"
            )
        return True

    def respawn(self) -> None:
        """Restart every dead process at once, without waiting for it to answer."""
        with self.lock:  # the provider may be being killed by the click's timer
            if self._reap(self.provider):
                self.provider = self._start_provider()
            for i, replica in enumerate(self.replicas):
                if self._reap(replica):
                    self.replicas[i] = self._start_replica()
            for i, rec in enumerate(self.reconcilers):
                if self._reap(rec):
                    self.reconcilers[i] = self._start_reconciler()

    def replica(self, i: int) -> Proc:
        """Replica i once it answers; restarted again if it died before."""
        for _ in range(20):
            self.respawn()
            proc = self.replicas[i]
            if proc is not None and proc.wait_ready():
                return proc
        raise SoakFailed(f"replica {i} keeps dying before it answers")

    def ensure(self) -> None:
        """Every process running, and the HTTP ones answering."""
        for _ in range(20):
            self.respawn()
            http = [self.provider, *self.replicas]
            if all(p is not None and p.wait_ready() for p in http):
                return
        raise SoakFailed("processes keep dying before they answer")

    def stop_all(self) -> None:
        for proc in self._all():
            proc.kill()

    # -- operations ------------------------------------------------------------------

    def operation(self, who: dict[str, str], n: int) -> None:
        op = Op(new_order(self.url, payable_minor=5000), "confirm")
        if self.rng.randrange(DECLINE_ONE_IN) == 0:
            op.action = "decline"
        first = self.rng.randrange(2)
        kill_provider = self.rng.randrange(PROVIDER_KILL_ONE_IN) == 0
        began = time.monotonic()
        proposal_id = self._propose(self.replica(first), who, op.order)
        self.figures.phases["propose"] += time.monotonic() - began
        self.ops.append(op)
        timer = None
        if kill_provider:  # somewhere in the click: before, during or after the refund
            timer = threading.Timer(self.rng.uniform(0.0, 0.15), self._kill_provider)
            timer.start()
        try:
            for attempt in range(6):
                replica = self.replica((first + attempt) % 2)
                try:
                    answer = httpx.post(
                        f"{replica.url}/v1/approvals/{proposal_id}/decision",
                        headers={**who, "Idempotency-Key": f"soak-{n}"},
                        json={"action": op.action},
                        timeout=CLICK_TIMEOUT,
                    )
                    if self._thread_held(answer):
                        continue  # a replica killed mid-run held it: click again now
                    if answer.status_code < 500:
                        return
                except httpx.TransportError:
                    pass  # the replica died under the click: send it to the other one
                self.respawn()
            raise SoakFailed(f"operation {n}: no replica took the click six times")
        finally:
            if timer is not None:
                timer.join()

    def _thread_held(self, answer: httpx.Response) -> bool:
        """A `409 in_progress` for the thread itself (not an execution): the run of a
        replica killed mid-click still holds the thread's lease (docs/failover.md).
        True once that lease ran out, so the next click gets in."""
        body = answer.json() if answer.status_code == 409 else {}
        details = body.get("details") or {}
        if body.get("code") != "in_progress" or "execution_id" in details:
            return False
        thread = details.get("thread_id")

        def free() -> bool:
            with psycopg.connect(self.url) as conn:
                row = conn.execute(LEASE_FREE_SQL, (thread,)).fetchone()
            return bool(row and row[0])

        wait_until(free, f"the lease of thread {thread} to run out", THREAD_LEASE_S * 4)
        return True

    def _kill_provider(self) -> None:
        """SIGKILL the provider and start the next one at once, on the same port."""
        with self.lock:
            provider = self.provider
            if provider is None or not provider.alive():
                return
            provider.kill()
            self.figures.kills[PROVIDER] += 1
            self.figures.restarts += 1
            self.provider = self._start_provider()

    def _propose(self, replica: Proc, who: dict[str, str], order: str) -> str:
        base = replica.url
        thread = httpx.post(f"{base}/v1/threads", headers=who, timeout=PROPOSE_TIMEOUT)
        thread_id = thread.json()["thread_id"]
        text = f"refund 10.00 CNY of {order} because it arrived broken"
        reply = post_within(
            f"{base}/v1/threads/{thread_id}/messages", who, {"content": text}, PROPOSE_S
        )
        kind, end = sse_events(reply)[-1]
        if kind != "end" or not end.get("pending"):
            raise SoakFailed(f"no proposal for {order}: {reply[-2000:]}")
        return str(end["pending"][0]["proposal_id"])

    def enough(self) -> bool:
        done = self.figures.operations
        if done < self.operations:
            return False
        if all(self.figures.kills[p] >= self.min_kills for p in POINTS):
            return True
        return done >= 3 * self.operations  # give up; the check reports the shortfall

    def run(self) -> Figures:
        start = time.monotonic()
        who = {"Authorization": "Bearer " + make_key(self.url, "user_42")}
        try:
            self.ensure()
            while not self.enough():
                began = time.monotonic()
                self.operation(who, self.figures.operations)
                self.figures.operations += 1
                self.figures.phases["operations"] += time.monotonic() - began
                if self.figures.operations % 25 == 0:
                    self.progress(f"{self.figures.kill_line()} so far")
                self.respawn()
            settling = time.monotonic()
            self.settle()
            self.figures.settle_seconds = time.monotonic() - settling
        finally:
            self.stop_all()
            self.launcher.close()
        self.check()
        self.figures.seconds = time.monotonic() - start
        return self.figures

    def settle(self) -> None:
        """Disarm everyone, then wait until nothing is running, unknown or retryable."""
        self.armed = False
        for proc in self._all():
            if proc.kind != "provider":
                proc.kill()  # not at a step: not counted (killed_by_us)
        self.ensure()
        end = time.monotonic() + SETTLE_S
        while True:
            with psycopg.connect(self.url) as conn:
                row = conn.execute(OPEN_SQL).fetchone()
            if row is not None and row[0] == 0:
                return
            if time.monotonic() > end:
                raise SoakFailed(f"{row} executions still open after {SETTLE_S} s")
            self.ensure()  # unarmed: nothing should die, but a death is reported
            time.sleep(0.2)

    def check(self) -> None:
        confirmed = [op.order for op in self.ops if op.action == "confirm"]
        declined = [op.order for op in self.ops if op.action == "decline"]
        self.figures.confirmed, self.figures.declined = len(confirmed), len(declined)
        pool = open_pool(self.url, max_size=2)
        try:
            self.figures.check = check = ledger_check(pool, TENANT)
            with pool.connection() as conn:
                rows = conn.execute(EFFECTS_SQL, (declined,)).fetchall()
                unsettled = conn.execute(UNSETTLED_SQL).fetchall()
        finally:
            pool.close()
        self.figures.declined_effects = sum(int(r["effects"]) for r in rows)
        check["not_settled"] = len(unsettled)
        self.figures.unsettled = [
            f"{r['request_key']} {r['status']} after {r['checks']} checks {r['escalation']}"
            for r in unsettled
        ]


@contextmanager
def soak_database(server_url: str) -> Iterator[str]:
    url = throwaway.create_database(server_url, "writegate_soak")
    try:
        setup_app(url)
        with psycopg.connect(url, autocommit=True) as conn:
            seed_demo(conn)
        yield url
    finally:
        throwaway.drop_database(server_url, url)


def run_soak(
    server_url: str,
    operations: int,
    seed: int,
    min_kills: int = 1,
    progress: Callable[[str], None] | None = None,
) -> Figures:
    """Run the soak; any failure names the seed that reproduces its choices."""
    with soak_database(server_url) as url:
        soak = Soak(url, seed, operations, min_kills, progress)
        try:
            return soak.run()
        except Exception as exc:
            raise SoakFailed(
                f"soak failed (seed {seed}): {exc}\n{soak.figures.line(seed)}"
            ) from exc


def settings(default_ops: int, default_seed: int | None = None) -> tuple[int, int]:
    """(operations, seed) from WRITEGATE_SOAK_OPS / WRITEGATE_SOAK_SEED, else the
    defaults (no default seed: a random one, printed with the figures)."""
    ops = int(os.environ.get(OPS_ENV) or default_ops)
    raw = os.environ.get(SEED_ENV, "").strip()
    if raw:
        return ops, int(raw)
    if default_seed is not None:
        return ops, default_seed
    return ops, random.SystemRandom().randrange(10**6)


def min_kills_for(operations: int) -> int:
    """Kills wanted at each point: 10 from 200 operations on, at least 1."""
    return max(1, min(10, math.floor(operations / 20)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--operations", type=int, default=None, help=f"default ${OPS_ENV}, 200")
    parser.add_argument("--seed", type=int, default=None, help=f"default ${SEED_ENV}, random")
    parser.add_argument("--min-kills", type=int, default=None)
    args = parser.parse_args(argv)
    ops, seed = settings(200)
    ops = args.operations if args.operations is not None else ops
    seed = args.seed if args.seed is not None else seed
    min_kills = args.min_kills if args.min_kills is not None else min_kills_for(ops)
    print(f"soak: {ops} operations, seed {seed}", flush=True)
    figures = run_soak(
        throwaway.server_url(), ops, seed, min_kills, lambda line: print(line, flush=True)
    )
    print(figures.line(seed), flush=True)
    print(figures.details(), flush=True)
    problems = figures.failures(min_kills)
    if problems:
        raise SystemExit("soak failed: " + "; ".join(problems))


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    main()
