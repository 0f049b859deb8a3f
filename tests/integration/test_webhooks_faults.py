"""Webhook delivery under faults: a real receiver process, real deliverer processes,
real SIGKILLs. Every request's signature is checked by the receiver with the
`standardwebhooks` library; the events are counted at the receiver: emitted (the
outbox's rows for its endpoint), delivered, retried, duplicated by id, lost (0).

The writes are refunds confirmed and executed in this process; the events they cause
are written by the database in the same transactions, and `writegate webhooks deliver
--loop` processes send them.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.app_db import setup_app
from tests.integration.fault_scripts.harness import wait_until
from tests.integration.http_fixtures import free_port
from tests.integration.private_cluster import PrivateCluster
from tests.integration.tier_helpers import new_order, open_runtime, propose_refund, token_of
from writegate.approval.models import Identity
from writegate.checkpoints.database import with_database
from writegate.checkpoints.outbox import PgOutbox
from writegate.demo.runtime import open_demo
from writegate.runtime.wiring import Runtime
from writegate.surfaces.webhooks import new_secret

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
RECEIVER = "tests.integration.webhook_receiver_child"
LEASE_S, TIMEOUT_S = 8.0, 6.0  # a held request is killed well inside the timeout
DEADLINE_S = 60.0  # a process starts in seconds on a loaded machine
EVENTS_SQL = "SELECT event_id, attempts, delivered_at FROM writegate.outbox WHERE endpoint_id = %s"


@pytest.fixture(scope="module")
def rt(create_database: Callable[[], str]) -> Iterator[Runtime]:
    with open_runtime(create_database) as runtime:
        yield runtime


class Receiver:
    """The receiver process on one port; its log outlives a kill and a restart."""

    def __init__(self, log: Path, secret: str) -> None:
        self.log, self.secret, self.port = log, secret, free_port()
        self.url = f"http://127.0.0.1:{self.port}/hooks"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, *options: str) -> Receiver:
        listening = self.count("listening")
        argv = [sys.executable, "-m", RECEIVER, str(self.port), self.secret, str(self.log)]
        self.proc = subprocess.Popen([*argv, *options], cwd=ROOT, stdout=subprocess.DEVNULL)
        wait_until(lambda: self.count("listening") > listening, "the receiver to listen")
        return self

    def lines(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line]

    def count(self, verdict: str) -> int:
        return sum(1 for line in self.lines() if line["verdict"] == verdict)

    def release(self) -> None:
        Path(str(self.log) + ".release").touch()

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=DEADLINE_S)


class Deliverer:
    """`writegate webhooks deliver --loop` as its own process."""

    def __init__(self, url: str, log: Path) -> None:
        argv = [sys.executable, "-m", "writegate", "webhooks", "deliver", "--loop",
                "--interval", "0.05", "--lease", str(LEASE_S), "--timeout", str(TIMEOUT_S),
                "--backoff", "0.05", "--backoff-max", "0.2",
                "--public-url", "https://approvals.example.test"]  # fmt: skip
        env = {**os.environ, "DATABASE_URL": url}
        with log.open("ab") as errors:  # what a deliverer said, for a failure's report
            self.proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=errors, stderr=errors)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=DEADLINE_S)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=DEADLINE_S)


@dataclass
class Counts:
    emitted: int
    delivered: int
    retried: int  # requests the receiver saw beyond the first of each id
    duplicated_by_id: int  # accepted again, under the same webhook-id
    lost: int
    attempts: int  # counted by the deliverers (refused connections included)
    bad_signatures: int


def count(rt: Runtime, endpoint_id: str, receiver: Receiver) -> Counts:
    with rt.pool.connection() as conn:
        rows = conn.execute(EVENTS_SQL, (endpoint_id,)).fetchall()
    emitted = {row["event_id"] for row in rows}
    lines = receiver.lines()
    requests = [line for line in lines if line["verdict"] in ("accepted", "refused", "held")]
    requests = [line for line in requests if not _held_after_accept(line, lines)]
    accepted = Counter(line["id"] for line in lines if line["verdict"] == "accepted")
    return Counts(
        emitted=len(emitted),
        delivered=len(emitted & set(accepted)),
        retried=len(requests) - len({line["id"] for line in requests}),
        duplicated_by_id=sum(n - 1 for n in accepted.values()),
        lost=len(emitted - set(accepted)),
        attempts=sum(row["attempts"] for row in rows),
        bad_signatures=receiver.count("bad_signature"),
    )


def _held_after_accept(line: dict[str, Any], lines: list[dict[str, Any]]) -> bool:
    """A `held` line after its own `accepted` one is the same request, not another."""
    if line["verdict"] != "held":
        return False
    at = lines.index(line)
    return bool(at) and lines[at - 1]["verdict"] == "accepted" and lines[at - 1]["id"] == line["id"]


def check_events(receiver: Receiver, tokens: list[str]) -> None:
    """One id per thing that happened; no token; the preview's display values; a link."""
    lines = receiver.lines()
    events = {line["id"]: line["event"] for line in lines if line["verdict"] == "accepted"}
    happened = {
        (e["type"], e["data"]["proposal_id"], (e["data"].get("receipt") or {}).get("execution_id"))
        for e in events.values()
    }
    assert len(happened) == len(events), "the same event arrived under two ids"
    for event in events.values():
        data = event["data"]
        assert data["link"] == f"https://approvals.example.test/v1/approvals/{data['proposal_id']}"
        assert [f["display"] for f in data["preview"]["fields"]]
        sent = json.dumps(event)
        assert "token_hash" not in sent and not any(token in sent for token in tokens)


def emit_writes(rt: Runtime, tenant: str, writes: int) -> list[str]:
    """`writes` refunds, each proposed (an event) and executed (an event with a receipt);
    the confirmation tokens, which no event may carry."""
    who = Identity("user_" + secrets.token_hex(3), tenant)
    tokens = []
    for _ in range(writes):
        proposal = propose_refund(rt, new_order(rt, 19900, who), 19900, who)
        tokens.append(token_of(rt, proposal, who=who))
        assert rt.executor.execute(who, tokens[-1]).status == "succeeded"
    return tokens


def endpoint_for(rt: Runtime, receiver: Receiver, tenant: str) -> str:
    """An endpoint for every event but the expiry warning (its window is one second: the
    scan would race the test's own writes for a proposal still waiting)."""
    endpoint = PgOutbox(rt.pool).add_endpoint(
        endpoint_id="ep_" + secrets.token_hex(6), tenant_id=tenant, url=receiver.url,
        secret=receiver.secret, expiring_within=timedelta(seconds=1),
    )  # fmt: skip
    return endpoint.endpoint_id


def all_delivered(rt: Runtime, endpoint_id: str, receiver: Receiver) -> Counts:
    """The counts once every emitted event was accepted; fails with them at the deadline."""

    def done() -> Counts | None:
        counts = count(rt, endpoint_id, receiver)
        return counts if counts.emitted and counts.lost == 0 else None

    try:
        return wait_until(done, "every event accepted", DEADLINE_S)  # type: ignore[no-any-return]
    except AssertionError as timed_out:
        counts = count(rt, endpoint_id, receiver)
        raise AssertionError(f"not every event arrived: {counts}") from timed_out


@pytest.fixture
def scenario(rt: Runtime, tmp_path: Path) -> Iterator[dict[str, Any]]:
    tenant = "tenant_" + secrets.token_hex(4)
    receiver = Receiver(tmp_path / "received.jsonl", new_secret())
    endpoint_id = endpoint_for(rt, receiver, tenant)
    made: list[Deliverer] = []

    def deliverer() -> Deliverer:
        made.append(Deliverer(rt.pool.conninfo, tmp_path / "deliverers.log"))
        return made[-1]

    yield {"tenant": tenant, "receiver": receiver, "endpoint": endpoint_id, "deliverer": deliverer}
    for d in made:
        d.stop()
    if receiver.proc is not None and receiver.proc.poll() is None:
        receiver.kill()


def report(name: str, counts: Counts) -> None:
    print(f"\n{name}: {json.dumps(asdict(counts))}")


def test_a_receiver_that_fails_three_times_then_accepts_gets_each_event_once(rt, scenario):
    receiver: Receiver = scenario["receiver"].start("--fail-first", "3")
    tokens = emit_writes(rt, scenario["tenant"], 3)
    scenario["deliverer"]()
    scenario["deliverer"]()  # two deliverers share the outbox
    counts = all_delivered(rt, scenario["endpoint"], receiver)
    report("fails three times", counts)
    assert counts.emitted == 6 and counts.delivered == 6 and counts.lost == 0
    assert counts.retried == 3 * 6 and counts.attempts == 4 * 6
    assert counts.duplicated_by_id == 0 and counts.bad_signatures == 0
    check_events(receiver, tokens)


def test_a_receiver_killed_mid_request_gets_the_event_after_its_restart(rt, scenario):
    receiver: Receiver = scenario["receiver"].start("--hold", "before")
    tokens = emit_writes(rt, scenario["tenant"], 2)
    scenario["deliverer"]()
    wait_until(lambda: receiver.count("held"), "a request held at the receiver")
    receiver.kill()  # SIGKILL while the deliverer waits for its answer
    receiver.start()
    counts = all_delivered(rt, scenario["endpoint"], receiver)
    report("receiver killed mid-request", counts)
    assert (counts.emitted, counts.delivered, counts.lost) == (4, 4, 0)
    assert counts.retried >= 1 and counts.duplicated_by_id == 0 and counts.bad_signatures == 0
    check_events(receiver, tokens)


def test_the_outbox_survives_a_kill_of_the_deliverer_mid_send(rt, scenario):
    """The deliverer dies while its request is in flight, unanswered: the event must
    still arrive, sent by another deliverer once the dead one's lease ends."""
    receiver: Receiver = scenario["receiver"].start("--hold", "before")
    tokens = emit_writes(rt, scenario["tenant"], 2)
    first = scenario["deliverer"]()
    wait_until(lambda: receiver.count("held"), "a request held at the receiver")
    first.kill()
    receiver.release()  # its answer (503) goes to a dead socket
    scenario["deliverer"]()
    counts = all_delivered(rt, scenario["endpoint"], receiver)
    report("deliverer killed mid-send", counts)
    assert (counts.emitted, counts.delivered, counts.lost) == (4, 4, 0)
    assert counts.duplicated_by_id == 0 and counts.bad_signatures == 0
    check_events(receiver, tokens)


def test_a_deliverer_killed_between_send_and_mark_sends_again_under_the_same_id(rt, scenario):
    receiver: Receiver = scenario["receiver"].start("--hold", "after")
    tokens = emit_writes(rt, scenario["tenant"], 2)
    first = scenario["deliverer"]()
    wait_until(lambda: receiver.count("held"), "an accepted request held unanswered")
    (held,) = [line["id"] for line in receiver.lines() if line["verdict"] == "held"]
    first.kill()  # the receiver has it; the deliverer never hears so
    receiver.release()
    scenario["deliverer"]()
    counts = all_delivered(rt, scenario["endpoint"], receiver)
    report("deliverer killed between send and mark", counts)
    assert (counts.emitted, counts.delivered, counts.lost) == (4, 4, 0)
    accepted = Counter(line["id"] for line in receiver.lines() if line["verdict"] == "accepted")
    assert counts.duplicated_by_id == 1 and accepted[held] == 2  # at least once, same id
    assert counts.bad_signatures == 0
    check_events(receiver, tokens)


def test_the_outbox_survives_a_postgres_restart_mid_delivery(tmp_path: Path) -> None:
    """A private cluster (never the shared one) crashes while a delivery is in flight;
    the deliverer reports the outage, goes on when the server is back, and every event
    (those from before the crash, and one written after it) arrives."""
    cluster = PrivateCluster().init()
    cluster.start()
    try:
        db = with_database(cluster.url, "writegate_hooks")
        with psycopg.connect(cluster.url, autocommit=True) as conn:
            conn.execute("CREATE DATABASE writegate_hooks")
        setup_app(db)
        runtime = open_demo(db, setup=False).runtime
        receiver = Receiver(tmp_path / "received.jsonl", new_secret()).start("--hold", "before")
        tenant = "tenant_" + secrets.token_hex(4)
        endpoint_id = endpoint_for(runtime, receiver, tenant)
        log = tmp_path / "deliverers.log"
        delivering = Deliverer(db, log)
        try:
            tokens = emit_writes(runtime, tenant, 2)
            wait_until(lambda: receiver.count("held"), "a request held at the receiver")
            cluster.stop("immediate")
            receiver.release()  # the answer comes while the database is down
            wait_until(lambda: "database unavailable" in log.read_text(), "the outage noticed")
            cluster.start()
            tokens += emit_writes(runtime, tenant, 1)
            counts = all_delivered(runtime, endpoint_id, receiver)
        finally:
            delivering.stop()
            receiver.kill()
            runtime.close()
        report("postgres restarted mid-delivery", counts)
        assert (counts.emitted, counts.delivered, counts.lost) == (6, 6, 0)
        assert counts.duplicated_by_id == 0 and counts.bad_signatures == 0
        check_events(receiver, tokens)
    finally:
        cluster.remove()
