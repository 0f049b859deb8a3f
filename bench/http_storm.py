"""Part 4b: the HTTP confirm storm. Two `writegate serve` processes on one database;
N clicks on one proposal's Confirm, at the same moment, split over both replicas.

Per round a fresh order is refunded: the proposal is made over HTTP on one replica
(a thread, a message, the scripted model proposes `refund_order`), then N threads
released on one barrier each post `{"action": "confirm"}` with its own
Idempotency-Key (N different clicks, not retries of one), alternating replicas. Each
click's answer and time are recorded; the refunds are counted at the provider's own
table, which must hold exactly one per round. A busy click is answered with a
retryable 409 or 503 and is counted as such, not retried.

The clicks are sent the way a browser with the page open sends them: each on a
connection opened before the barrier, its request ready, over the standard library's
plain HTTP client. The clients share this process and the machine with the replicas;
a heavier client (httpx here before) spent as much CPU per round as a replica and
added its own queueing to every click's time.

Before the timed rounds each replica makes and confirms one write, so the figures do
not include a process's first request. Needs the `server` extra (`writegate serve`);
without it the part reports itself skipped.
"""

from __future__ import annotations

import importlib.util
import json
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.client import HTTPConnection, HTTPException
from typing import Any
from urllib.parse import urlsplit

import httpx
import psycopg
from psycopg.rows import dict_row

from writegate.bench.db import BenchServer
from writegate.bench.replicas import ORDER_SQL, TENANT, USER, start_replicas, stop
from writegate.bench.stats import summary_ms
from writegate.demo.seed import seed_demo
from writegate.surfaces.store.keys import create_key

REPLICAS = 2
SERVER_MODULES = ("fastapi", "uvicorn", "sse_starlette")
PROVIDER_SQL = "SELECT count(*) FROM provider.refunds WHERE order_id = %s"


def available() -> bool:
    """Whether `writegate serve` can run here: the `server` extra is installed."""
    return all(importlib.util.find_spec(name) is not None for name in SERVER_MODULES)


def _propose(http: httpx.Client, base: str, auth: dict[str, str], conn: Any) -> tuple[str, str]:
    order = "ord_s" + secrets.token_hex(5)
    conn.execute(ORDER_SQL, (order, TENANT, USER))
    thread = http.post(f"{base}/v1/threads", headers=auth).json()["thread_id"]
    text = f"refund 10.00 CNY of {order} because it arrived broken"
    reply = http.post(f"{base}/v1/threads/{thread}/messages", headers=auth, json={"content": text})
    if '"awaiting_approval"' not in reply.text:
        raise RuntimeError(f"the storm's proposal was not made: {reply.text[-500:]}")
    proposal = json.loads(reply.text.rsplit("data: ", 1)[1])["pending"][0]["proposal_id"]
    return order, str(proposal)


def _click(http: httpx.Client, base: str, auth: dict[str, str], pid: str, key: str) -> str:
    answer = http.post(
        f"{base}/v1/approvals/{pid}/decision",
        headers={**auth, "Idempotency-Key": key},
        json={"action": "confirm"},
    )
    return _answer(answer.status_code, answer.content)


def _answer(status: int, raw: bytes) -> str:
    body = json.loads(raw)
    if status == 200:
        return f"200 {body.get('outcome', '')}".strip()
    return f"{status} {body.get('code', '')}"


def _round(
    bases: list[str], auth: dict[str, str], pid: str, clicks: int
) -> tuple[list[str], list[float]]:
    barrier = threading.Barrier(clicks)
    answers, latencies = [""] * clicks, [0.0] * clicks
    body = json.dumps({"action": "confirm"}).encode()

    def click(i: int) -> None:
        where = urlsplit(bases[i % len(bases)])
        conn = HTTPConnection(where.hostname or "127.0.0.1", where.port, timeout=120)
        headers = {**auth, "Idempotency-Key": f"{pid}-{i}", "Content-Type": "application/json"}
        try:
            try:
                conn.connect()
            except OSError as exc:
                answers[i] = f"error {type(exc).__name__}"
            barrier.wait(timeout=60)
            if answers[i]:
                return
            started = time.perf_counter()
            try:
                conn.request("POST", f"/v1/approvals/{pid}/decision", body=body, headers=headers)
                reply = conn.getresponse()
                answers[i] = _answer(reply.status, reply.read())
            except (OSError, HTTPException, ValueError) as exc:
                answers[i] = f"error {type(exc).__name__}"
            latencies[i] = time.perf_counter() - started
        finally:
            conn.close()

    threads = [threading.Thread(target=click, args=(i,)) for i in range(clicks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answers, latencies


def run_http_storm(
    server: BenchServer, clicks: int, rounds: int, advance: Callable[[], None]
) -> dict[str, Any]:
    if not available():
        for _ in range(rounds):
            advance()
        return {"skipped": "the server extra is not installed (uv sync --extra server)"}
    url = server.create("http")
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        seed_demo(conn)
        auth = {"Authorization": "Bearer " + create_key(conn, USER, TENANT).secret}
    replicas = start_replicas(url, REPLICAS)
    bases = [base for _, base in replicas]
    per_round: list[dict[str, Any]] = []
    latencies: list[float] = []
    try:
        with (
            httpx.Client(timeout=120) as http,  # the proposals and the warm-up clicks
            psycopg.connect(url, autocommit=True) as conn,
        ):
            for i, base in enumerate(bases):  # warm each replica: one write each
                _, pid = _propose(http, base, auth, conn)
                _click(http, bases[(i + 1) % len(bases)], auth, pid, f"warm-{pid}")
            for r in range(rounds):
                order, pid = _propose(http, bases[r % len(bases)], auth, conn)
                answers, took = _round(bases, auth, pid, clicks)
                row = conn.execute(PROVIDER_SQL, (order,)).fetchone()
                refunds = int(row[0]) if row else 0
                per_round.append(
                    {"refunds": refunds, "answers": dict(Counter(answers)),
                     "latency": summary_ms(took)}
                )  # fmt: skip
                latencies.extend(took)
                advance()
    finally:
        stop([proc for proc, _ in replicas])
        server.drop(url)
    return {
        "replicas": REPLICAS,
        "clicks_per_round": clicks,
        "rounds": rounds,
        "refunds_per_round": [r["refunds"] for r in per_round],
        "exactly_one_every_time": all(r["refunds"] == 1 for r in per_round),
        "answers": dict(sum((Counter(r["answers"]) for r in per_round), Counter())),
        "latency": summary_ms(latencies),
        "per_round": per_round,
    }
