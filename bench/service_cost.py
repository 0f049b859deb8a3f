"""The service at the cost of the library: one approved refund over HTTP, and in-process.

Three paths, interleaved write by write in one run, each on a database of its own,
with the demo's offline scripted model:

- `http`: the service as `writegate serve` runs it (`create_app` under uvicorn, in a
  thread of this process), driven by a minimal client (the standard library's HTTP
  client): create a thread, post the message and read the event stream to its end,
  confirm through `/v1/approvals/{id}/decision`, read the receipt in its answer.
- `service`: the same requests' work with the HTTP layer taken away:
  `HttpStore.create_thread` and `turns.start_turn` (its stream read to the end), called
  with the request's key, which each checks in its first transaction as the routes do,
  and `Decisions.decide`, after the key lookup its route makes first.
- `library`: `open_demo` + `build_graph`, invoke, resume with the confirm.

Per write: the wall time (median), Python CPU (the client's thread CPU apart; the
server's is the process's less the client's), commits and statements (counted by the
driver, `bench.counting`, on every pool of the path, the thread locks' included),
durable commits (commit records in the WAL) and WAL bytes (`pg_walinspect`, the
records of the path's own database; a temporary replication slot keeps the WAL until
it is read; the slot and the extension need a superuser). A server without
`pg_walinspect` (PostgreSQL's contrib; the embedded server has none) leaves those two
figures unmeasured: None, and the table says why. `service` less `library` is the
service's bookkeeping; `http` less `service` is the HTTP stack.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from langchain_core.messages import HumanMessage
from langgraph.types import Command
from psycopg.rows import dict_row

from writegate.bench.counting import Tally, counting_connection_class
from writegate.bench.counts import runtime_on
from writegate.bench.db import (
    INSERT_ORDERS_SQL,
    ORDER_PAYABLE,
    TENANT,
    USER,
    BenchServer,
    dbname,
    disable_autovacuum,
    open_bench_pool,
)
from writegate.bench.http_floor import FloorServer, Recorded, request
from writegate.demo.model import demo_chat_model
from writegate.demo.seed import seed_demo
from writegate.graph.build import build_graph
from writegate.surfaces.store.keys import KeyHolder, create_key
from writegate.surfaces.web.inputs import ConfirmIn
from writegate.surfaces.web.services import Services, Settings
from writegate.surfaces.web.turns import start_turn

PATHS = ("http", "service", "library")
TARGET_RATIO = 1.3
_LSN_SQL = "SELECT pg_current_wal_lsn() AS lsn"
_KEEP_WAL_SQL = "SELECT pg_create_physical_replication_slot(%s, true, true)"
_DB_OID_SQL = "SELECT oid FROM pg_database WHERE datname = %s"
_WALINSPECT_SQL = "SELECT count(*) AS n FROM pg_available_extensions WHERE name = 'pg_walinspect'"
NO_WALINSPECT = "not measured: the server has no pg_walinspect (PostgreSQL's contrib)"
# The window's WAL records of one database: those of its transactions (a commit record
# names no relation, its transaction's other records do), and those without a
# transaction (pruning, hint bits) on its relations.
_WAL_SQL = """
WITH r AS (
    SELECT xid, record_type, resource_manager, record_length,
           block_ref ~ ('rel [0-9]+/' || %(db)s || '/') AS ours
    FROM pg_get_wal_records_info(%(start)s::pg_lsn, %(end)s::pg_lsn)
), x AS (SELECT DISTINCT xid FROM r WHERE ours AND xid <> '0')
SELECT count(*) FILTER (WHERE resource_manager = 'Transaction' AND record_type = 'COMMIT')
           AS commits,
       coalesce(sum(record_length), 0) AS bytes
FROM r WHERE xid IN (SELECT xid FROM x) OR (xid = '0' AND ours)"""


def _refund_text(order: str) -> str:
    return f"refund 10.00 CNY of {order} because it arrived broken"


class _Path:
    """One path's database, counters and figures."""

    def __init__(self, server: BenchServer, name: str, orders: int) -> None:
        self.name = name
        self.url = server.create(name)
        disable_autovacuum(self.url)
        with psycopg.connect(self.url, autocommit=True, row_factory=dict_row) as conn:
            seed_demo(conn)
            self.key = create_key(conn, USER, TENANT).secret
            conn.execute(INSERT_ORDERS_SQL, (f"ord_{name[0]}", TENANT, USER, ORDER_PAYABLE, orders))
            row = conn.execute(_DB_OID_SQL, (dbname(self.url),)).fetchone()
        assert row is not None
        self.db_oid = int(row["oid"])
        self.orders = [f"ord_{name[0]}{g}" for g in range(orders, 0, -1)]
        self.tally = Tally()
        self.pool = open_bench_pool(
            self.url, max_size=10, connection_class=counting_connection_class(self.tally)
        )
        self.runtime = runtime_on(self.url, self.pool)
        self.model = demo_chat_model(self.runtime.registry.openai_tools(), env={})
        self.walls: list[float] = []
        self.cpu: list[float] = []
        self.client_cpu: list[float] = []

    def close(self) -> None:
        self.runtime.close()
        self.pool.close()


class _Http(_Path):
    def __init__(self, server: BenchServer, name: str, orders: int) -> None:
        import uvicorn

        from writegate.surfaces.web.app import create_app

        super().__init__(server, name, orders)
        app = create_app(self.runtime, settings=Settings(), model=self.model)
        self.services: Services = app.state.wg
        self.services.store.open_lock_pool(counting_connection_class(self.tally))
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")
        self.uvicorn = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.uvicorn.run, name="bench-serve", daemon=True)
        self.thread.start()
        while not self.uvicorn.started:
            time.sleep(0.01)
        socket = self.uvicorn.servers[0].sockets[0]
        self.port = socket.getsockname()[1]
        self.auth = {"Authorization": "Bearer " + self.key}

    def _call(self, method: str, path: str, body: Any = None, **headers: str) -> bytes:
        return request(self.port, method, path, body, **self.auth, **headers)

    def write(self, order: str) -> None:
        created = self._call("POST", "/v1/threads")
        thread = json.loads(created)["thread_id"]
        stream = self._call(
            "POST", f"/v1/threads/{thread}/messages", {"content": _refund_text(order)}
        )
        end = json.loads(stream.decode().rsplit("data: ", 1)[1])
        if not end.get("pending"):
            raise RuntimeError(f"no approval over HTTP: {stream[-1500:]!r}")
        pid = end["pending"][0]["proposal_id"]
        answer = self._call(
            "POST",
            f"/v1/approvals/{pid}/decision",
            {"action": "confirm"},
            **{"Idempotency-Key": f"bench-{pid}"},
        )
        if json.loads(answer).get("receipt") is None:
            raise RuntimeError(f"no receipt over HTTP: {answer[-500:]!r}")
        self.recorded = Recorded(created, stream, answer)

    def close(self) -> None:
        self.uvicorn.should_exit = True
        self.thread.join(timeout=30)
        self.services.close()
        super().close()


class _Service(_Path):
    def __init__(self, server: BenchServer, name: str, orders: int) -> None:
        super().__init__(server, name, orders)
        self.services = Services.build(self.runtime, Settings(), self.model)
        self.services.store.open_lock_pool(counting_connection_class(self.tally))
        self.loop = asyncio.new_event_loop()

    async def _turn(self, key: KeyHolder, thread_id: str, text: str) -> str:
        last = ""
        async for event in await start_turn(self.services, key, thread_id, text, "bench"):
            last = str(event.data)
        return str(json.loads(last)["pending"][0]["proposal_id"])

    def write(self, order: str) -> None:
        svc = self.services
        key = KeyHolder(self.key)  # checked as the routes check it
        thread_id = svc.store.create_thread(key)["thread_id"]
        pid = self.loop.run_until_complete(self._turn(key, thread_id, _refund_text(order)))
        with self.pool.connection() as conn:  # the decision's route looks its key up first
            identity = key.principal(conn)[1]
        confirm = ConfirmIn(action="confirm")
        status, body = svc.decisions.decide(identity, pid, confirm, f"bench-{pid}", "bench")
        if status != 200 or body.get("receipt") is None:
            raise RuntimeError(f"no receipt from the service: {status} {body}")

    def close(self) -> None:
        self.loop.close()
        self.services.close()
        super().close()


class _Library(_Path):
    def __init__(self, server: BenchServer, name: str, orders: int) -> None:
        super().__init__(server, name, orders)
        self.graph = build_graph(
            self.runtime, model=self.model, checkpointer=self.runtime.checkpointer
        )
        self.threads = 0

    def write(self, order: str) -> None:
        self.threads += 1
        config: Any = {
            "configurable": {
                "thread_id": f"lib-{self.threads}",
                "user_id": USER,
                "tenant_id": TENANT,
                "roles": [],
            }
        }
        out = self.graph.invoke({"messages": [HumanMessage(_refund_text(order))]}, config)
        (question,) = out["__interrupt__"]
        value = {"action": "confirm", "proposal_id": question.value["proposal_id"]}
        out = self.graph.invoke(Command(resume={question.id: value}), config)
        if "__interrupt__" in out:
            raise RuntimeError(f"the library's confirm asked again: {out['__interrupt__']}")


def _timed(path: _Path, client: bool) -> None:
    order = path.orders.pop()
    wall, cpu, own = time.perf_counter(), time.process_time(), time.thread_time()
    path.write(order)  # type: ignore[attr-defined]
    path.walls.append(time.perf_counter() - wall)
    process, thread = time.process_time() - cpu, time.thread_time() - own
    path.cpu.append(process)
    path.client_cpu.append(thread if client else 0.0)


# Transactions of the pools' own upkeep, not of the path's work: a connection's
# liveness check after it sat idle, and a new connection's timeline check.
_UPKEEP = ("pool_check:", "timeline:")


def _counts(tally: Tally) -> tuple[int, int, int]:
    """Commits (as the server counts them), statements, and the transactions of the
    path's own work: its commits less the pools' upkeep (a connection opened, its
    statements' first prepares, its checks), which a pool growing or idling mid-run
    adds."""
    snap = tally.snapshot()
    work = sum(n for kind, n in snap["transactions"].items() if not kind.startswith(_UPKEEP))
    return tally.server_equivalent(), sum(snap["statements"].values()), work


def _wal(url: str, db_oid: int, start: str, end: str) -> tuple[int, int]:
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        row = conn.execute(_WAL_SQL, {"db": str(db_oid), "start": start, "end": end}).fetchone()
    assert row is not None
    return int(row["commits"]), int(row["bytes"])


def _walinspect(conn: psycopg.Connection[Any]) -> bool:
    return bool(conn.execute(_WALINSPECT_SQL).fetchone()["n"])  # type: ignore[index]


def _lsn(conn: psycopg.Connection[Any]) -> str:
    return str(conn.execute(_LSN_SQL).fetchone()["lsn"])  # type: ignore[index]


@contextmanager
def _wal_kept(url: str) -> Iterator[psycopg.Connection[Any]]:
    """A session holding a temporary physical replication slot: the server keeps the
    WAL written meanwhile (other databases' too: the server is shared), so it can be
    read once the writes are done. The slot goes with the session."""
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        name = "writegate_bench_" + secrets.token_hex(4)
        conn.execute(_KEEP_WAL_SQL, (name,))
        yield conn


def run_service_cost(
    server: BenchServer, writes: int, warmup: int = 2, advance: Callable[[], None] | None = None
) -> dict[str, Any]:
    """The three paths, `writes` timed writes each after `warmup`, interleaved."""
    n = writes + warmup
    paths: dict[str, _Path] = {}
    floor: FloorServer | None = None
    try:
        paths["http"] = _Http(server, "http", n)
        paths["service"] = _Service(server, "service", n)
        paths["library"] = _Library(server, "library", n)
        for _ in range(warmup):
            for path in paths.values():
                path.write(path.orders.pop())  # type: ignore[attr-defined]
        http_path: _Http = paths["http"]  # type: ignore[assignment]
        floor = FloorServer(http_path.recorded)
        for _ in range(warmup):
            floor.write()
        floor_cpu: list[float] = []
        with _wal_kept(paths["library"].url) as kept:
            before = {name: _counts(p.tally) for name, p in paths.items()}
            start = _lsn(kept)
            for _ in range(writes):
                for name, path in paths.items():
                    _timed(path, client=name == "http")
                cpu = time.process_time()
                floor.write()
                floor_cpu.append(time.process_time() - cpu)
                if advance is not None:
                    advance()
            end = _lsn(kept)
            after = {name: _counts(p.tally) for name, p in paths.items()}
            readable = _walinspect(kept)
            wal = {
                name: _wal(p.url, p.db_oid, start, end) if readable else None
                for name, p in paths.items()
            }
        out: dict[str, Any] = {"writes": writes, "wal": None if readable else NO_WALINSPECT}
        for name, path in paths.items():
            counted = wal[name]
            client = statistics.fmean(path.client_cpu)
            out[name] = {
                "wall_ms": round(1000 * statistics.median(path.walls), 1),
                "cpu_ms": round(1000 * statistics.fmean(path.cpu), 1),
                "server_cpu_ms": round(1000 * (statistics.fmean(path.cpu) - client), 1),
                "client_cpu_ms": round(1000 * client, 1),
                "commits": round((after[name][0] - before[name][0]) / writes, 1),
                "durable_commits": round(counted[0] / writes, 1) if counted else None,
                "wal_bytes": round(counted[1] / writes) if counted else None,
                "statements": round((after[name][1] - before[name][1]) / writes, 1),
                "transactions": round((after[name][2] - before[name][2]) / writes, 1),
            }
        lib, http, svc = out["library"], out["http"], out["service"]
        keys = ("wall_ms", "cpu_ms", "commits", "durable_commits", "wal_bytes", "statements")
        out["ratio"] = {k: round(http[k] / lib[k], 2) if lib[k] else None for k in keys}
        out["service_ratio"] = {k: round(svc[k] / lib[k], 2) if lib[k] else None for k in keys}
        out["breakdown_cpu_ms"] = {
            "service_bookkeeping": round(svc["cpu_ms"] - lib["cpu_ms"], 1),
            "http_stack": round(http["cpu_ms"] - svc["cpu_ms"], 1),
            # the same requests answered with the same bytes, with no work behind them
            "http_floor": round(1000 * statistics.fmean(floor_cpu), 1),
            # what the target leaves the service over the library, HTTP included
            "allowed": round((TARGET_RATIO - 1) * lib["cpu_ms"], 1),
        }
        out["within_target"] = all(
            (out["ratio"][k] or 0) <= TARGET_RATIO for k in ("cpu_ms", "commits")
        )
        return out
    finally:
        if floor is not None:
            floor.close()
        for path in paths.values():
            path.close()


ROWS = (
    ("wall median, ms", "wall_ms"),
    ("Python CPU, ms", "cpu_ms"),
    ("commits", "commits"),
    ("durable commits", "durable_commits"),
    ("WAL, bytes", "wal_bytes"),
    ("statements", "statements"),
)


def print_service_cost(out: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    table = Table(title=f"an approved write, {out['writes']} each, interleaved")
    for column in ("per write", "HTTP", "service", "library", "HTTP/library", "service/library"):
        table.add_column(column, justify="left" if column == "per write" else "right")
    http, svc, lib = out["http"], out["service"], out["library"]
    for label, key in ROWS:
        cells = [str(http[key]), str(svc[key]), str(lib[key])]
        if key == "cpu_ms":
            cells[0] += f" ({http['server_cpu_ms']} + {http['client_cpu_ms']})"
        table.add_row(label, *cells, f"{out['ratio'][key]}x", f"{out['service_ratio'][key]}x")
    console.print(table)
    if out["wal"]:
        console.print(f"durable commits and WAL bytes {out['wal']}")
    parts = out["breakdown_cpu_ms"]
    console.print(
        f"CPU over the library: service bookkeeping {parts['service_bookkeeping']} ms, "
        f"HTTP stack {parts['http_stack']} ms (server + client); "
        f"within {TARGET_RATIO}x in CPU and commits: {out['within_target']}"
    )
    console.print(
        f"HTTP floor: {parts['http_floor']} ms of CPU a write for the same three requests "
        f"answered with the same bytes and no work behind them (server + client); "
        f"{TARGET_RATIO}x the library leaves {parts['allowed']} ms for HTTP and bookkeeping"
    )
