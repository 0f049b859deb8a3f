"""Shared machinery of the fault-injection suite: real processes, real kills, the tally.

- `ProviderProcess`: `writegate provider serve` as its own process on loopback.
- `Child`: a worker process (`worker.py`) fed one JSON job; `run_child` waits for it.
- `Tally` / `ledger_check`: after each scenario, compare the ledger with the provider
  and count duplicates (more than one effect for one approved operation) and lost
  operations (approved, but not exactly one effect that the ledger records as
  succeeded, or still open). The session prints the totals and writes them as JSON.
"""

from __future__ import annotations

import json
import os
import secrets
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest

from writegate.checkpoints.pool import Pool
from writegate.demo.provider_http import HttpProvider

ROOT = Path(__file__).resolve().parents[3]
WORKER = "tests.integration.fault_scripts.worker"
DEADLINE_S = 30.0

INSERT_ORDER_SQL = """
INSERT INTO orders (order_id, tenant_id, user_id, currency, payable_minor, refunded_minor,
                    shipping_address, version)
VALUES (%s, %s, %s, 'CNY', %s, 0, '', 1)"""

# One row per approved operation of a tenant, with what the provider holds for its key.
LEDGER_VS_PROVIDER_SQL = """
SELECT e.request_key, e.status, e.provider_ref, e.args->>'order_id' AS order_id,
       r.provider_ref AS provider_has, o.refunded_minor,
       (SELECT count(*) FROM provider.refunds x WHERE x.order_id = e.args->>'order_id')
           AS effects_for_order,
       (SELECT COALESCE(sum(amount_minor), 0) FROM provider.refunds x
        WHERE x.order_id = e.args->>'order_id') AS paid_minor
FROM writegate.executions e
LEFT JOIN provider.refunds r ON r.idempotency_key = e.request_key
LEFT JOIN orders o ON o.order_id = e.args->>'order_id'
WHERE e.tenant_id = %s
ORDER BY e.created_at"""


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(5)}"


def make_order(pool: Pool, tenant: str, user: str, amount: int = 19900) -> str:
    order_id = new_id("ord")
    with pool.connection() as conn:
        conn.execute(INSERT_ORDER_SQL, (order_id, tenant, user, amount))
    return order_id


def wait_until(condition: Callable[[], Any], what: str, deadline_s: float = DEADLINE_S) -> Any:
    """Poll `condition` until it is truthy; fail after the deadline (never a blind sleep)."""
    end, delay = time.monotonic() + deadline_s, 0.01
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


def _read_line(proc: subprocess.Popen[str], what: str) -> str:
    assert proc.stdout is not None
    end = time.monotonic() + DEADLINE_S
    while time.monotonic() < end:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if ready:
            return proc.stdout.readline()
        if proc.poll() is not None:
            return proc.stdout.readline()
    raise AssertionError(f"no line from {what} within {DEADLINE_S} s")


class ProviderProcess:
    """The HTTP provider simulator, a separate process on a free loopback port."""

    def __init__(self, db_url: str, stall_s: float = 3.0) -> None:
        self.db_url, self.stall_s = db_url, stall_s
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self) -> ProviderProcess:
        cmd = [sys.executable, "-m", "writegate", "provider", "serve", "--port", "0"]
        self.proc = subprocess.Popen(
            [*cmd, "--stall", str(self.stall_s)],
            cwd=ROOT,
            env={**os.environ, "DATABASE_URL": self.db_url},
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        line = _read_line(self.proc, "the provider")
        assert line.startswith("listening on "), f"provider did not start: {line!r}"
        self.url = line.split()[-1]
        return self

    def client(self, timeout: float = 1.0) -> HttpProvider:
        return HttpProvider(self.url, timeout=timeout)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.terminate()
            self.proc.wait(timeout=DEADLINE_S)


class Child:
    """One worker process running one job."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", WORKER],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()

    def wait_ready(self) -> None:
        assert _read_line(self.proc, "a worker").strip() == "ready"

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def finish(self) -> tuple[int, dict[str, Any]]:
        out, err = self.proc.communicate(timeout=DEADLINE_S)
        lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        if self.proc.returncode not in (0, -signal.SIGKILL):
            raise AssertionError(f"worker failed ({self.proc.returncode}): {err[-3000:]}")
        return self.proc.returncode, lines[-1] if lines else {}


def run_child(job: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    return Child(job).finish()


@dataclass
class Tally:
    scenarios: int = 0
    kills: int = 0
    provider_deaths: int = 0
    approved: int = 0
    effects: int = 0
    duplicates: int = 0
    lost: int = 0

    def record(self, check: dict[str, int]) -> None:
        self.scenarios += 1
        for key in ("approved", "effects", "duplicates", "lost"):
            setattr(self, key, getattr(self, key) + check[key])


TALLY = Tally()


def ledger_check(pool: Pool, tenant: str) -> dict[str, int]:
    """Compare the tenant's ledger with the provider; count it into the session tally.

    Every execution of the tenant is an approved operation (one per order in these
    scenarios). It is fine when it is `succeeded`, the provider holds exactly one
    effect for it under its request key with the reference the ledger recorded, and
    the amount reserved on the order equals what the provider paid out. Otherwise it
    is lost (no effect, an effect the ledger does not know, still open, money out of
    step); every further effect for the same order is a duplicate.
    """
    with pool.connection() as conn:
        rows = conn.execute(LEDGER_VS_PROVIDER_SQL, (tenant,)).fetchall()
    check = {"approved": len(rows), "effects": 0, "duplicates": 0, "lost": 0, "open": 0}
    for row in rows:
        effects = int(row["effects_for_order"])
        check["effects"] += min(effects, 1)
        check["duplicates"] += max(effects - 1, 0)
        ok = (
            row["status"] == "succeeded"
            and row["provider_has"] is not None
            and row["provider_has"] == row["provider_ref"]
            and row["refunded_minor"] == row["paid_minor"]
        )
        check["lost"] += 0 if ok else 1
        check["open"] += row["status"] in ("running", "unknown", "failed_retryable")
    TALLY.record(check)
    return check


class _SummaryPlugin:
    def __init__(self, path: Path) -> None:
        self.path = path

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        figures = asdict(TALLY)
        self.path.write_text(json.dumps(figures, indent=2))
        terminalreporter.section("fault injection")
        terminalreporter.write_line(
            f"scenarios run {TALLY.scenarios}, kills injected {TALLY.kills} "
            f"(+{TALLY.provider_deaths} provider deaths), approved operations "
            f"{TALLY.approved}, effects {TALLY.effects}, duplicates found {TALLY.duplicates}, "
            f"operations lost {TALLY.lost}"
        )
        terminalreporter.write_line(f"figures: {self.path}")


@pytest.fixture(scope="session")
def fault_tally(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Tally]:
    """The session's tally; its figures are printed once, in the terminal summary."""
    manager = request.config.pluginmanager
    if not manager.has_plugin("writegate-fault-tally"):
        path = tmp_path_factory.getbasetemp() / "fault_injection_summary.json"
        manager.register(_SummaryPlugin(path), "writegate-fault-tally")
    yield TALLY


def fault_line(name: str, operations: int, faults: int, check: dict[str, int]) -> str:
    """The one line each database-fault scenario prints (docs/operations.md quotes them)."""
    return (
        f"fault {name}: operations {operations}, faults injected {faults}, "
        f"effects {check['effects']}, duplicates {check['duplicates']}, lost {check['lost']}"
    )
