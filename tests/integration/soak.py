"""A randomized kill soak: refunds through two `writegate serve` replicas and two
`writegate reconcile --loop` processes, each armed to SIGKILL itself at a random step
boundary (`WRITEGATE_FAULT_KILL_AT`), and the provider process killed now and then.

    uv run python -m tests.integration.soak --operations 200 --seed 7

Each operation: a fresh order, a thread, a message (a proposal), a confirm with an
Idempotency-Key; if the replica dies under the confirm, the same click is sent to the
other one. A dead process is restarted armed at the step hit least so far. At the end
the reconcilers settle what is left and the ledger is compared with the provider
(`ledger_check`): duplicates and lost operations must both be 0. Prints:

    operations N, kills K (per point ...), effects N, duplicates 0, lost 0 (seed S)
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import psycopg

from tests.integration.fault_scripts.harness import ROOT, ProviderProcess, ledger_check, wait_until
from tests.integration.http_fixtures import (
    TENANT,
    Replica,
    free_port,
    make_key,
    new_order,
    sse_events,
)
from writegate.checkpoints.migrate import setup_database
from writegate.checkpoints.pool import open_pool
from writegate.testing import database as throwaway
from writegate.tools.seed import seed_demo

SERVE_POINTS = ("serve:claimed", "serve:downstream_returned", "serve:recorded")
RECONCILE_POINTS = ("reconcile:claimed", "reconcile:looked_up", "reconcile:downstream_returned")
LEASE_S = 2.0  # executions orphaned by a killed replica are due this soon
OPEN_SQL = """
SELECT count(*) AS n FROM wg_executions
WHERE status IN ('running', 'unknown', 'failed_retryable')"""


@dataclass
class Figures:
    operations: int = 0
    kills: Counter[str] = field(default_factory=Counter)
    check: dict[str, int] = field(default_factory=dict)

    def line(self, seed: int) -> str:
        per = ", ".join(f"{p} {n}" for p, n in sorted(self.kills.items()))
        return (
            f"operations {self.operations}, kills {sum(self.kills.values())} (per point {per}), "
            f"effects {self.check.get('effects', 0)}, duplicates {self.check.get('duplicates', 0)}"
            f", lost {self.check.get('lost', 0)} (seed {seed})"
        )


class Reconcilers:
    """A `writegate reconcile --loop` process."""

    def __init__(self, url: str, env: dict[str, str]) -> None:
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the child
        cmd = ["reconcile", "--loop", "--interval", "0.2", "--lease", str(LEASE_S)]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "writegate", *cmd],
            cwd=ROOT,
            env={**os.environ, "DATABASE_URL": url, **env},
            stdout=subprocess.DEVNULL,
            stderr=self.log,
        )

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)


class Soak:
    def __init__(self, url: str, seed: int, operations: int) -> None:
        self.url, self.rng, self.operations = url, random.Random(seed), operations
        self.figures = Figures()
        self.provider = ProviderProcess(url, stall_s=1.0)
        self.provider_port = free_port()
        self.replicas: list[Replica | None] = [None, None]
        self.reconcilers: list[Reconcilers | None] = [None, None]
        self.armed: dict[int, str] = {}  # id(process) -> its kill point

    # -- processes ----------------------------------------------------------------

    def _arm(self, points: tuple[str, ...], nth_max: int) -> tuple[str, dict[str, str]]:
        least = min(self.figures.kills[p] for p in points)
        point = self.rng.choice([p for p in points if self.figures.kills[p] == least])
        nth = self.rng.randint(1, nth_max)
        env = {
            "WRITEGATE_FAULT_KILL_AT": f"{point.split(':')[1]}@{nth}",
            "WRITEGATE_PROVIDER_URL": f"http://127.0.0.1:{self.provider_port}",
            "WRITEGATE_EXECUTION_LEASE_SECONDS": str(LEASE_S),
        }
        return point, env

    def start_provider(self) -> None:
        port = self.provider_port
        cmd = [sys.executable, "-m", "writegate", "provider", "serve", "--port", str(port)]
        self.provider.proc = subprocess.Popen(
            [*cmd, "--stall", "1.0"],
            cwd=ROOT,
            env={**os.environ, "DATABASE_URL": self.url},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.provider.url = f"http://127.0.0.1:{port}"

        def up() -> bool:
            try:
                return httpx.get(self.provider.url + "/healthz", timeout=1).status_code < 500
            except httpx.HTTPError:
                return False

        wait_until(up, "the provider", 60)

    def kill_provider(self) -> None:
        assert self.provider.proc is not None
        self.provider.proc.kill()
        self.provider.proc.wait(timeout=30)
        self.figures.kills["provider"] += 1
        self.start_provider()

    def ensure(self, armed: bool = True) -> None:
        """Restart every dead replica and reconciler; count where each one died."""
        for i, replica in enumerate(self.replicas):
            if replica is None or replica.proc.poll() is not None:
                if replica is not None:
                    self._count_death(replica.proc, replica.output())
                point, env = self._arm(SERVE_POINTS, 4)
                if not armed:
                    env.pop("WRITEGATE_FAULT_KILL_AT")
                fresh = Replica(self.url, env)
                self.armed[id(fresh.proc)] = point
                self.replicas[i] = fresh
        for i, rec in enumerate(self.reconcilers):
            if rec is None or rec.proc.poll() is not None:
                if rec is not None:
                    self._count_death(rec.proc, rec.output())
                point, env = self._arm(RECONCILE_POINTS, 2)
                if not armed:
                    env.pop("WRITEGATE_FAULT_KILL_AT")
                fresh_rec = Reconcilers(self.url, env)
                self.armed[id(fresh_rec.proc)] = point
                self.reconcilers[i] = fresh_rec
        for replica in self.replicas:
            assert replica is not None
            try:
                replica.wait_ready(120)
            except AssertionError:
                if replica.proc.poll() is None:
                    raise
                return self.ensure(armed)  # it died at its step already: count, restart
        return None

    def _count_death(self, proc: subprocess.Popen[Any], output: str) -> None:
        point = self.armed.pop(id(proc), "")
        if "killed at" in output:
            self.figures.kills[point] += 1
        elif proc.returncode not in (0, -9):
            raise AssertionError(f"a process failed ({proc.returncode}): {output[-3000:]}")

    def stop_all(self) -> None:
        for replica in self.replicas:
            if replica is not None:
                replica.kill()
        for rec in self.reconcilers:
            if rec is not None:
                rec.stop()
        self.provider.stop()

    # -- operations ---------------------------------------------------------------

    def operation(self, who: dict[str, str], n: int) -> None:
        order = new_order(self.url, payable_minor=5000)
        first = self.rng.randrange(2)
        proposal_id = None
        for attempt in range(4):
            replica = self.replicas[(first + attempt) % 2]
            assert replica is not None
            try:
                if proposal_id is None:
                    proposal_id = self._propose(replica.url, who, order)
                replica_answer = httpx.post(
                    f"{replica.url}/v1/approvals/{proposal_id}/decision",
                    headers={**who, "Idempotency-Key": f"soak-{n}"},
                    json={"action": "confirm"},
                    timeout=30,
                )
                if replica_answer.status_code < 500:
                    return
            except httpx.HTTPError:
                pass  # the replica died under us: the same click goes to the other one
            self.ensure()

    @staticmethod
    def _propose(base: str, who: dict[str, str], order: str) -> str:
        thread = httpx.post(f"{base}/v1/threads", headers=who, timeout=30).json()["thread_id"]
        text = f"refund 10.00 CNY of {order} because it arrived broken"
        reply = httpx.post(
            f"{base}/v1/threads/{thread}/messages", headers=who, json={"content": text}, timeout=60
        )
        kind, end = sse_events(reply.text)[-1]
        assert kind == "end" and end["pending"], reply.text
        return str(end["pending"][0]["proposal_id"])

    def run(self) -> Figures:
        who = {"Authorization": "Bearer " + make_key(self.url, "user_42")}
        provider_every = max(self.operations // 12, 3)
        self.start_provider()
        self.ensure()
        try:
            for n in range(self.operations):
                self.operation(who, n)
                self.figures.operations += 1
                if self.rng.randrange(provider_every) == 0:
                    self.kill_provider()
                self.ensure()
            self.settle()
        finally:
            self.stop_all()
        pool = open_pool(self.url, max_size=2)
        try:
            self.figures.check = ledger_check(pool, TENANT)
        finally:
            pool.close()
        return self.figures

    def settle(self) -> None:
        """Disarm everyone, then wait until nothing is running, unknown or retryable."""
        for replica in self.replicas:
            if replica is not None and replica.proc.poll() is None:
                self.armed.pop(id(replica.proc), None)
                replica.kill()
        for rec in self.reconcilers:
            if rec is not None and rec.proc.poll() is None:
                self.armed.pop(id(rec.proc), None)
                rec.stop()
        self.ensure(armed=False)

        def settled() -> bool:
            with psycopg.connect(self.url) as conn:
                row = conn.execute(OPEN_SQL).fetchone()
            return row is not None and row[0] == 0

        wait_until(settled, "the reconcilers to settle everything", 180)


@contextmanager
def soak_database(server_url: str) -> Iterator[str]:
    url = throwaway.create_database(server_url, "writegate_soak")
    try:
        setup_database(url)
        with psycopg.connect(url, autocommit=True) as conn:
            seed_demo(conn)
        yield url
    finally:
        throwaway.drop_database(server_url, url)


def run_soak(server_url: str, operations: int, seed: int) -> Figures:
    with soak_database(server_url) as url:
        return Soak(url, seed, operations).run()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--operations", type=int, default=200)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**6)
    figures = run_soak(throwaway.server_url(), args.operations, seed)
    print(figures.line(seed), flush=True)
    if figures.check.get("duplicates") or figures.check.get("lost"):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
