"""Failover soaks: refunds through two `writegate serve` replicas and a reconciler on a
pg_auto_failover cluster (`ha_cluster.py`) whose primary is SIGKILLed under the writes.

    uv run python -m tests.integration.failover_soak --operations 40 --failovers 5 --seed 7
    uv run python -m tests.integration.failover_soak --lost --operations 40 --seed 7

Every writegate process gets the multi-host URL (`host1,host2 ... target_session_attrs=
read-write`) and is never restarted: it must follow the new primary by itself. The
provider is the outside world, so its own store is on the shared server, not on the
cluster that fails (`writegate provider serve` with a database of its own).

Each operation: a fresh order, a thread, a message (the proposal), then a person's
confirm click with an Idempotency-Key, sent again (same key, either replica) for as long
as the answer is retryable. Some operations carry a failover: the primary is killed

  - `t1`: inside the execute transaction (a trigger on the demo's `refunds` insert,
    part of the claim's transaction, sleeps while armed; the kill finds it sleeping);
  - `claimed`: after the claim committed, before the provider is called;
  - `downstream_returned`: after the provider answered, before the outcome is recorded
    (the replica holds at the executor's step hook, `WRITEGATE_FAULT_HOLD_DIR`);
  - `t2`: inside the transaction that records the outcome (a trigger on the refund's
    update to `succeeded`);
  - `random`: at a random moment of the click;

in turn, at random operations. After each kill the harness waits for the promotion and
brings the old node back as the standby while the operations go on.

`--lost` makes replication asynchronous and stops the WAL sender before the kill (at a
random moment: before the proposal, before the click, or at the kill point), so the
promoted standby is missing commits that the old primary acknowledged.

At the end (processes still running, nothing restarted), the provider's count of the
refund requests it received is read per key, as a provider that never deduplicates
would see them: a send of a key after one of its sends was answered is a duplicate
(so is a second key paid for one order). Every operation is checked against the
provider's own table: exactly one effect for each one the person confirmed,
a ledger entry that agrees (execution `succeeded` with the provider's reference, the
refund row `succeeded`, the amount reserved on the order, an audit row of its
execution), or an escalation with a reason; under `--lost`, an effect whose rows were
all lost must be escalated by the reconciler's check after the promotion (the
provider's listing, approval/failover.py). It prints:

    operations N, failovers F, effects E, duplicates 0, lost 0, seed S
    sends per key {1: N}; ...
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import threading
import time
from collections import Counter
from typing import Any

import httpx
import psycopg
from psycopg.rows import dict_row

from tests.app_db import setup_app
from tests.integration.failover_figures import Failover, Figures, Op
from tests.integration.ha_cluster import HaCluster, wait_until
from tests.integration.http_fixtures import free_port, make_key, new_order, sse_events
from tests.integration.soak import CALL_TIMEOUT_S, Launcher, Proc, SoakFailed, post_within
from writegate.demo.seed import seed_demo
from writegate.testing import database as throwaway

POINTS = ("t1", "claimed", "downstream_returned", "t2", "random")
HOLD_STEPS = ("claimed", "downstream_returned")
FREEZE_AT = ("propose", "click", "kill")  # --lost: when the WAL sender is stopped
LEASE_S = 2.0
BACKOFF_S = 0.5
ANSWER_S = 90.0  # a click gets a final answer within this
HELD_S = 30.0  # an armed point is reached within this
TIMEOUT = httpx.Timeout(30.0, connect=5.0)
# What the model may be told about a refund: done, or a clear "not over yet" (a later
# turn brings it the reconciled outcome). Anything else (failed, declined) is wrong.
MODEL_MAY_SEE = ("succeeded", "in_progress", "outcome_unknown", "temporarily_unavailable")

# Armed for one primary only (its timeline): after the promotion, the row that armed the
# hold may still be there, and nothing on the new primary must sleep on it.
TIMELINE = "('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::integer"
HOLD_SQL = f"""
CREATE TABLE soak_hold (point text PRIMARY KEY, timeline integer NOT NULL);
CREATE FUNCTION soak_hold() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM soak_hold WHERE point = TG_ARGV[0] AND timeline = {TIMELINE})
    THEN
        PERFORM pg_sleep(30);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER soak_hold_t1 AFTER INSERT ON refunds
    FOR EACH ROW EXECUTE FUNCTION soak_hold('t1');
CREATE TRIGGER soak_hold_t2 AFTER UPDATE ON refunds
    FOR EACH ROW WHEN (NEW.status = 'succeeded') EXECUTE FUNCTION soak_hold('t2');
"""
SLEEPING_SQL = """
SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND datname = current_database()
"""
LEDGER_SQL = """
SELECT o.order_id, o.refunded_minor,
       (SELECT p.status FROM writegate.proposals p WHERE p.args->>'order_id' = o.order_id
        ORDER BY p.created_at DESC LIMIT 1) AS proposal_status,
       e.execution_id, e.request_key, e.status, e.provider_ref, e.escalation, e.proposal_id,
       r.status AS refund_status, r.provider_ref AS refund_ref,
       (SELECT count(*) FROM writegate.audit a
        WHERE a.request_key = e.request_key AND a.status = 'succeeded') AS audit_rows,
       (SELECT count(*) FROM writegate.audit a WHERE a.request_key = e.request_key
        AND a.result->>'action' = 'found_after_failover') AS found_by_check
FROM orders o
LEFT JOIN writegate.executions e ON e.args->>'order_id' = o.order_id
LEFT JOIN refunds r ON r.request_key = e.request_key
WHERE o.order_id = ANY(%s)"""
PROVIDER_SQL = """
SELECT order_id, idempotency_key, provider_ref, amount_minor FROM provider.refunds
WHERE order_id = ANY(%s)"""
# What the checks after each promotion left for a person, by request key.
ESCALATED_KEYS_SQL = """
SELECT request_key, reason FROM writegate.failover_escalations WHERE request_key IS NOT NULL"""
# Promotions the reconciler has not checked yet for the refunds (approval/failover.py).
UNCHECKED_SQL = """
SELECT count(*) FROM writegate.timelines t
WHERE t.began_at > '-infinity' AND NOT EXISTS (
    SELECT 1 FROM writegate.failover_checks c
    WHERE c.timeline_id = t.timeline_id AND c.operation = 'refund_order'
      AND c.checked_at IS NOT NULL)"""
ROWS_SQL = """
SELECT p.proposal_id, p.status AS proposal, e.status AS execution
FROM writegate.proposals p LEFT JOIN writegate.executions e ON e.proposal_id = p.proposal_id
WHERE p.proposal_id = ANY(%s)"""


class FailoverSoak:
    def __init__(
        self, server_url: str, seed: int, operations: int, failovers: int, *, lost: bool
    ) -> None:
        self.server_url, self.seed = server_url, seed
        self.operations, self.wanted = operations, failovers
        self.lost = lost
        self.rng = random.Random(seed)
        self.figures = Figures()
        self.ops: list[Op] = []
        self.launcher = Launcher()
        self.hold_dir = self.launcher.dir / "holds"
        self.hold_dir.mkdir()
        self.cluster = HaCluster(synchronous=not lost)
        self.procs: list[Proc] = []
        self.replicas: list[Proc] = []
        self.rejoining: threading.Thread | None = None
        self.rejoin_error: BaseException | None = None
        self.open_failover: Failover | None = None
        self.click_error: BaseException | None = None
        # Set while a failover's losses are being counted: clicks wait, so that what
        # the new primary lacks is seen before a retried click writes it anew.
        self.counted = threading.Event()
        self.counted.set()
        self.before: dict[str, tuple[str, str | None]] = {}
        self.escalated: dict[str, dict[str, Any]] = {}  # after a promotion, by request key
        self.url = self.provider_db = self.provider_url = ""

    # -- setup ------------------------------------------------------------------------

    def start(self) -> None:
        self.cluster.start()
        self.url = self.cluster.create_database("writegate_failover")
        setup_app(self.url)  # over the multi-host URL: on the primary
        with psycopg.connect(self.url, autocommit=True) as conn:
            seed_demo(conn)
            conn.execute(HOLD_SQL)
        self.provider_db = throwaway.create_database(self.server_url, "writegate_provider")
        setup_app(self.provider_db)
        provider_port = free_port()
        provider = self.launcher.start(
            "provider",
            ["provider", "serve", "--port", str(provider_port)],
            {"DATABASE_URL": self.provider_db},
        )
        provider.url = self.provider_url = f"http://127.0.0.1:{provider_port}"
        env = {
            "DATABASE_URL": self.url,
            "WRITEGATE_PROVIDER_URL": provider.url,
            "WRITEGATE_EXECUTION_LEASE_SECONDS": str(LEASE_S),
            "WRITEGATE_CALL_TIMEOUT_SECONDS": str(CALL_TIMEOUT_S),  # within the lease
            "WRITEGATE_FAULT_HOLD_DIR": str(self.hold_dir),
        }
        for _ in range(2):
            port = free_port()
            argv = ["serve", "--port", str(port), "--log-level", "warning"]
            replica = self.launcher.start("serve", argv, env)
            replica.url = f"http://127.0.0.1:{port}"
            self.replicas.append(replica)
        argv = ["reconcile", "--loop", "--interval", "0.2", "--lease", str(LEASE_S)]
        reconciler = self.launcher.start("reconcile", [*argv, "--backoff", str(BACKOFF_S)], env)
        self.procs = [provider, *self.replicas, reconciler]
        for proc in (provider, *self.replicas):
            if not proc.wait_ready():
                raise SoakFailed(f"{proc.kind} died at start: {proc.output()}")

    def alive(self) -> None:
        """Nothing is ever restarted: a process that died is a failure."""
        for proc in self.procs:
            if not proc.alive():
                raise SoakFailed(
                    f"the {proc.kind} process died (exit {proc.process.exitcode}): {proc.output()}"
                )

    def close(self) -> None:
        for proc in self.procs:
            proc.kill()
            text = proc.log.read_text(errors="replace") if proc.log.exists() else ""
            if "Traceback" in text and proc.kind == "serve":  # an unhandled error: show it
                self.figures.problems.append(
                    f"{proc.kind} log: ...{text[text.rfind('Traceback') :][-2500:]}"
                )
        self.launcher.close()
        if self.rejoining is not None:
            self.rejoining.join(timeout=90)
        self.cluster.remove()
        if self.provider_db:
            throwaway.drop_database(self.server_url, self.provider_db)

    # -- the person -------------------------------------------------------------------

    def _seen(self, op: Op, what: str) -> None:
        op.answers.append(what)
        self.figures.seen[what] += 1
        failover = self.open_failover
        if failover is not None and op.point:
            failover.clicks.append(f"{time.monotonic() - failover.killed_at:.1f} s {what}")

    def propose(self, op: Op, who: dict[str, str]) -> None:
        """A thread, a message, the proposal; retried while the answer is retryable."""
        end = time.monotonic() + ANSWER_S
        while time.monotonic() < end:
            replica = self.replicas[self.rng.randrange(2)]
            try:
                if not op.thread_id:
                    made = httpx.post(f"{replica.url}/v1/threads", headers=who, timeout=TIMEOUT)
                    self._seen(op, f"thread {made.status_code}")
                    if made.status_code != 201:
                        continue
                    op.thread_id = made.json()["thread_id"]
                text = f"refund 10.00 CNY of {op.order} because it arrived broken"
                reply = post_within(f"{replica.url}/v1/threads/{op.thread_id}/messages", who,
                                    {"content": text}, ANSWER_S)  # fmt: skip
            except httpx.TransportError:
                self._seen(op, "propose transport error")
                continue
            events = sse_events(reply)
            kind, data = events[-1] if events else ("none", {})
            if kind == "end" and data.get("pending"):
                op.proposal_id = str(data["pending"][0]["proposal_id"])
                return
            if self._pending(op, replica, who):
                return
            self._seen(
                op, f"propose {kind} {data.get('code', '') if isinstance(data, dict) else ''}"
            )
            time.sleep(0.1)
        raise SoakFailed(f"operation {op.n}: no proposal within {ANSWER_S} s: {op.answers}")

    def _pending(self, op: Op, replica: Proc, who: dict[str, str]) -> bool:
        """A turn cut short may still have made its proposal: use it, never a second."""
        try:
            view = httpx.get(f"{replica.url}/v1/threads/{op.thread_id}", headers=who,
                             timeout=TIMEOUT)  # fmt: skip
        except httpx.TransportError:
            return False
        if view.status_code != 200 or not view.json()["pending"]:
            return False
        op.proposal_id = str(view.json()["pending"][0]["proposal_id"])
        return True

    def click(self, op: Op, who: dict[str, str]) -> None:
        """Confirm, the same click again while the answer is retryable, until a final one."""
        end = time.monotonic() + ANSWER_S
        first = self.rng.randrange(2)
        attempt = 0
        while time.monotonic() < end:
            self.alive()
            replica = self.replicas[(first + attempt) % 2]
            attempt += 1
            try:
                answer = httpx.post(
                    f"{replica.url}/v1/approvals/{op.proposal_id}/decision",
                    headers={**who, "Idempotency-Key": f"failover-{op.n}"},
                    json={"action": "confirm"},
                    timeout=TIMEOUT,
                )
            except httpx.TransportError as exc:
                self._seen(op, f"transport {type(exc).__name__}")
                self.counted.wait(ANSWER_S)
                continue
            body = answer.json()
            if answer.status_code == 200:
                self._seen(op, f"200 {body['outcome']}")
                receipt = body.get("receipt") or {}
                op.receipt_ref = (receipt.get("result") or {}).get("provider_ref") or receipt.get(
                    "provider_ref"
                )
                if body["outcome"] == "executed":
                    self._writes_again()
                return
            self._seen(op, f"{answer.status_code} {body.get('code')}")
            if answer.status_code < 500 and not body.get("retryable"):
                return  # a final refusal (a proposal the database lost: not found)
            if answer.status_code >= 500 and not body.get("retryable"):
                self.figures.problems.append(f"operation {op.n}: {answer.status_code} {body}")
            time.sleep(0.1)  # a person clicks again after a moment
            self.counted.wait(ANSWER_S)
        raise SoakFailed(f"operation {op.n}: no final answer in {ANSWER_S} s: {op.answers}")

    def _writes_again(self) -> None:
        if self.open_failover is not None:
            failover, self.open_failover = self.open_failover, None
            failover.writes_again_s = time.monotonic() - failover.killed_at

    # -- failovers --------------------------------------------------------------------

    def arm(self, point: str) -> None:
        if point in HOLD_STEPS:
            (self.hold_dir / f"arm-{point}").touch()
        elif point in ("t1", "t2"):
            with psycopg.connect(self.url, autocommit=True) as conn:
                conn.execute(f"INSERT INTO soak_hold VALUES (%s, {TIMELINE})", (point,))

    def wait_held(self, point: str) -> None:
        if point in HOLD_STEPS:
            wait_until((self.hold_dir / f"held-{point}").exists, f"a replica at {point}", HELD_S)
        elif point in ("t1", "t2"):
            primary = self.cluster.primary()

            def sleeping() -> bool:
                with psycopg.connect(primary.dsn("writegate_failover"), autocommit=True) as conn:
                    row = conn.execute(SLEEPING_SQL).fetchone()
                return bool(row and row[0])

            wait_until(sleeping, f"a transaction held at {point}", HELD_S)
        else:
            time.sleep(self.rng.uniform(0.0, 0.3))  # a random moment of the click

    def fail_over(self, point: str, freeze: str) -> None:
        """Kill the primary now; promotion and the old node's return go on meanwhile."""
        if self.lost and freeze == "kill":
            self.cluster.freeze_replication()
        failover = Failover(point, freeze, time.monotonic())
        self.counted.clear()
        self.before = self.rows(self.cluster.primary().dsn("writegate_failover"))
        old = self.cluster.kill_primary()
        failover.killed_at = time.monotonic()
        for name in ("held-claimed", "held-downstream_returned"):
            (self.hold_dir / name).unlink(missing_ok=True)  # the replica goes on
        self.figures.failovers.append(failover)
        self.open_failover = failover

        def promote_and_rejoin() -> None:
            try:
                self.cluster.wait_promoted(old)
                failover.promoted_s = time.monotonic() - failover.killed_at
                failover.lost_ops = self.count_lost()
                with psycopg.connect(self.url, autocommit=True) as conn:
                    conn.execute("DELETE FROM soak_hold")
                self.cluster.rejoin(old)
            except BaseException as exc:
                self.rejoin_error = exc
            finally:
                self.counted.set()

        self.rejoining = threading.Thread(target=promote_and_rejoin, daemon=True)
        self.rejoining.start()

    def rows(self, dsn: str) -> dict[str, tuple[str, str | None]]:
        """Each operation's proposal and execution status, as one server has them."""
        ids = [op.proposal_id for op in self.ops if op.proposal_id]
        with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
            rows = conn.execute(ROWS_SQL, (ids,)).fetchall()
        return {r["proposal_id"]: (r["proposal"], r["execution"]) for r in rows}

    def count_lost(self) -> int:
        """Operations whose rows (or their last state) the promoted standby lacks."""
        after = self.rows(self.url)
        lost = 0
        for op in self.ops:
            was = self.before.get(op.proposal_id)
            now = after.get(op.proposal_id)
            if was is None or was == now:
                continue
            what = "proposal" if now is None else "execution" if now[1] is None else "outcome"
            op.lost = op.lost or f"{what} ({was[0]}/{was[1]} -> {now})"
            lost += 1
        return lost

    def ready_for_failover(self) -> None:
        """The previous failover is over: promoted, the old node back as the standby."""
        if self.rejoining is not None:
            self.rejoining.join(timeout=120)
            if self.rejoining.is_alive():
                raise SoakFailed("the old primary did not come back within 120 s")
            self.rejoining = None
        if self.rejoin_error is not None:
            raise SoakFailed(f"failover did not complete: {self.rejoin_error}")

    # -- the run ----------------------------------------------------------------------

    def plan(self) -> list[str]:
        """The point of each operation ("" for none): `wanted` failovers, spread out."""
        points = [POINTS[i % len(POINTS)] for i in range(self.wanted)]
        self.rng.shuffle(points)
        slots = sorted(self.rng.sample(range(1, max(self.operations, self.wanted + 1)),
                                       self.wanted))  # fmt: skip
        plan = [""] * max(self.operations, self.wanted + 1)
        for slot, point in zip(slots, points, strict=True):
            plan[slot] = point
        return plan

    def run(self) -> Figures:
        began = time.monotonic()
        try:
            self.start()
            who = {"Authorization": "Bearer " + make_key(self.url, "user_42")}
            for n, point in enumerate(self.plan()):
                self.operation(n, point, who)
                self.figures.operations += 1
            self.ready_for_failover()
            self.settle()
            self.check()
            self.read_model(who)
        finally:
            self.figures.seconds = time.monotonic() - began
            self.close()
        return self.figures

    def operation(self, n: int, point: str, who: dict[str, str]) -> None:
        self.alive()
        if point:
            self.ready_for_failover()
        freeze = self.rng.choice(FREEZE_AT) if point and self.lost else ""
        if freeze == "propose":
            self.cluster.freeze_replication()
        op = Op(n, self.new_order(), point)
        self.ops.append(op)
        self.propose(op, who)
        if freeze == "click":
            self.cluster.freeze_replication()
        if not point:
            self.click(op, who)
            return
        self.arm(point)
        clicking = threading.Thread(target=self._click_quietly, args=(op, who), daemon=True)
        clicking.start()
        self.wait_held(point)
        self.fail_over(point, freeze)
        clicking.join(timeout=ANSWER_S + 10)
        if self.click_error is not None:
            raise self.click_error

    def _click_quietly(self, op: Op, who: dict[str, str]) -> None:
        try:
            self.click(op, who)
        except BaseException as exc:
            self.click_error = exc

    def new_order(self) -> str:
        """The shop's own write (not writegate's): it waits out a failover in progress."""

        def made() -> str | None:
            try:
                return new_order(self.url, payable_minor=5000)
            except psycopg.OperationalError:
                return None

        return str(wait_until(made, "the shop's order to be written"))

    def settle(self) -> None:
        """Wait until nothing is running, unknown or retryable, and every promotion has
        been checked for what its lost commits did (the reconciler's work)."""

        def settled() -> bool:
            self.alive()
            with psycopg.connect(self.url) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM writegate.executions "
                    "WHERE status IN ('running', 'unknown', 'failed_retryable')"
                ).fetchone()
                unchecked = conn.execute(UNCHECKED_SQL).fetchone()
            return row is not None and unchecked is not None and row[0] == unchecked[0] == 0

        wait_until(settled, "every execution settled, every promotion checked", 120)

    def check(self) -> None:
        orders = [op.order for op in self.ops]
        with psycopg.connect(self.url, row_factory=dict_row) as conn:
            ledger = {r["order_id"]: r for r in conn.execute(LEDGER_SQL, (orders,)).fetchall()}
            self.escalated = {
                r["request_key"]: r["reason"] for r in conn.execute(ESCALATED_KEYS_SQL)
            }
        with psycopg.connect(self.provider_db, row_factory=dict_row) as conn:
            effects: dict[str, list[dict[str, Any]]] = {}
            for r in conn.execute(PROVIDER_SQL, (orders,)).fetchall():
                effects.setdefault(r["order_id"], []).append(r)
        calls = httpx.get(self.provider_url + "/_calls", timeout=TIMEOUT).json()
        check = self.figures.check
        self._sends_per_key(calls)
        for op in self.ops:
            paid = effects.get(op.order, [])
            row = ledger.get(op.order) or {}
            check["effects"] += min(len(paid), 1)
            check["duplicates"] += max(len(paid) - 1, 0)
            problem = self._problem(op, row, paid)
            if row.get("escalated_whole"):
                check["escalated_whole"] += 1
            if row.get("status") == "escalated" or row.get("escalated_whole"):
                check["escalated"] += 1
            elif problem is None:
                check["settled"] += 1
            if problem is not None:
                check["lost"] += 1
                where = self.figures.gaps if row.get("vanished") else self.figures.problems
                where.append(f"operation {op.n} ({op.point}): {problem}")
            if row.get("vanished"):
                check["lost_rows"] += 1
            elif op.lost:
                self._found_again(op, row, calls)

    def _sends_per_key(self, calls: dict[str, Any]) -> None:
        """Every refund request the provider received, per key, as a provider that never
        deduplicates would see them: a send of a key whose earlier send was answered is
        a duplicate, whatever the provider's own table made of it."""
        sends: dict[str, int] = calls["refund"]
        self.figures.sends_per_key = Counter(sends.values())
        for key, again in sorted(calls["resent"].items()):
            self.figures.check["duplicates"] += again
            self.figures.problems.append(
                f"key {key}: sent {sends.get(key)} times, {again} after an answered send"
            )

    def _found_again(self, op: Op, row: dict[str, Any], calls: dict[str, Any]) -> None:
        """An operation with lost rows: looked up by its key (or escalated), or sent again
        without a lookup (which only a provider that honours the key makes harmless)."""
        check = self.figures.check
        check["lost_rows"] += 1
        key = row.get("request_key") or ""
        sends, lookups = calls["refund"].get(key, 0), calls["lookup"].get(key, 0)
        if sends > 1 + lookups:
            check["blind"] += 1
            self.figures.gaps.append(
                f"operation {op.n} ({op.point}): lost {op.lost}; sent {sends} times, "
                f"looked up {lookups} times"
            )
        else:
            check["found_again"] += 1
            check["found_by_check"] += min(int(row.get("found_by_check") or 0), 1)

    def _problem(self, op: Op, row: dict[str, Any], paid: list[dict[str, Any]]) -> str | None:
        """What is wrong with one confirmed operation, or None."""
        if not paid and self.lost and not row.get("execution_id"):
            # The database lost the operation before anything was sent: nothing happened,
            # and the person must have been told so, never "executed".
            if any(a.startswith("200 executed") for a in op.answers):
                return f"told executed, but nothing was done: {op.answers}"
            self.figures.check["not_done"] += 1
            return None
        if paid and self.lost and not row.get("execution_id"):
            self.figures.check["vanished"] += 1
            row["vanished"] = True
            if (self.escalated.get(paid[0]["idempotency_key"]) or {}).get("reason"):
                # Found by the check after the promotion (the provider's listing, or the
                # lookup of its waiting proposal), and a person has it, with why.
                row["escalated_whole"] = True
                return None
            if row.get("proposal_status"):  # its confirmation and claim were lost
                return (f"the provider has {paid[0]['provider_ref']}; the ledger has the "
                        f"proposal {row['proposal_status']}, nothing more")  # fmt: skip
            return f"the provider has {paid[0]['provider_ref']}; the ledger lost every row"
        if len(paid) != 1:
            return f"{len(paid)} effects at the provider; the person saw {op.answers}"
        ref = paid[0]["provider_ref"]
        if op.receipt_ref is not None and op.receipt_ref != ref:
            return f"the person was shown {op.receipt_ref}, the provider has {ref}"
        if row.get("status") == "escalated":
            return None if row.get("escalation") else "escalated without a reason"
        if row.get("status") != "succeeded" or row.get("provider_ref") != ref:
            return f"ledger {row.get('status')} {row.get('provider_ref')} != provider {ref}"
        if row.get("refund_status") != "succeeded" or row.get("refund_ref") != ref:
            return f"refund row {row.get('refund_status')} {row.get('refund_ref')}"
        if row.get("refunded_minor") != paid[0]["amount_minor"]:
            return f"order reserved {row.get('refunded_minor')}, paid {paid[0]['amount_minor']}"
        if not row.get("audit_rows"):
            return "no audit row for its execution"
        return None

    def read_model(self, who: dict[str, str]) -> None:
        """What the model was told about each refund (the tool message, last one)."""
        for op in self.ops:
            view = httpx.get(f"{self.replicas[0].url}/v1/threads/{op.thread_id}", headers=who,
                             timeout=TIMEOUT)  # fmt: skip
            if view.status_code == 404:  # the thread itself was lost with the commits
                self.figures.model_saw["thread lost"] += 1
                continue
            messages = view.json()["messages"]
            tools = [m for m in messages if m["role"] == "tool" and m["name"] == "refund_order"]
            status = "none"
            if tools:
                try:
                    content = json.loads(tools[-1]["content"])
                    status = str(content.get("status") or content.get("code"))
                except ValueError:
                    status = "not json"
            self.figures.model_saw[status] += 1
            # Lost commits may take the thread back to its question ("none") or lose the
            # proposal (`not_found`): the model is told nothing wrong either way.
            if status not in MODEL_MAY_SEE + (("not_found", "none") if self.lost else ()):
                self.figures.problems.append(f"operation {op.n}: the model was told {status}")


def run_failover_soak(
    server_url: str, operations: int, failovers: int, seed: int, *, lost: bool = False
) -> Figures:
    soak = FailoverSoak(server_url, seed, operations, failovers, lost=lost)
    try:
        return soak.run()
    except Exception as exc:
        figures = soak.figures
        raise SoakFailed(
            f"failover soak failed (seed {seed}): {exc}\n{figures.line(seed)}\n{figures.details()}"
        ) from exc


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--operations", type=int, default=40)
    parser.add_argument("--failovers", type=int, default=5)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--lost", action="store_true", help="asynchronous, commits lost")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**6)
    kind = "lost-commits" if args.lost else "failover"
    print(f"{kind} soak: {args.operations} operations, {args.failovers} failovers, seed {seed}")
    figures = run_failover_soak(
        throwaway.server_url(), args.operations, args.failovers, seed, lost=args.lost
    )
    print(figures.line(seed))
    print(figures.details())
    if figures.problems or figures.gaps or figures.check["duplicates"] or figures.check["lost"]:
        raise SystemExit("soak failed")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stopped: tear down all
    main()
