"""The bench's attribution times every ledger call a write makes, whichever path it takes.

It once timed only propose, decide and execute: the graph's one-transaction confirm and
execute, and the presented-question record, were counted as "graph engine, nodes, model".
"""

from __future__ import annotations

from collections.abc import Callable

from tests.app_db import setup_app
from writegate.bench.attribution import Recorder, instrument_runtime
from writegate.bench.db import Orders
from writegate.bench.workload import GraphRunner
from writegate.checkpoints.pool import open_pool
from writegate.demo.provider import SimulatedProvider
from writegate.demo.runtime import open_demo


def test_every_ledger_call_of_a_graph_write_is_timed(create_database: Callable[[], str]) -> None:
    url = create_database()
    setup_app(url)
    recorder = Recorder()
    pool = open_pool(url)
    provider = SimulatedProvider(pool=pool)
    with open_demo(url, setup=False, provider=provider, pool=pool).runtime as runtime:
        instrument_runtime(runtime, provider, recorder)
        orders = Orders(runtime.pool, "attr_test")
        orders.reserve(2)
        runner = GraphRunner("writegate", runtime, orders)
        recorder.take()
        runner.op("attr-test-thread", durability="sync")
        seconds, counts = recorder.take()
    # propose; the question recorded as it ends the run; on resume, propose again and the
    # confirm executed in one transaction, with the provider's call inside it.
    assert counts["ledger"] == 4, counts
    assert counts["provider"] == 1
    assert seconds["ledger"] > seconds["provider"] > 0
