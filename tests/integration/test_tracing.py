"""One trace per proposal's life, across processes: the HTTP replica that proposed and
confirmed (in this process, spans kept in memory) and a `writegate reconcile` process
(spans printed by the console exporter) that settled the unknown outcome. The trace
context travels on the proposal's row. Spans carry ids, never a token or arguments."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.integration.http_fixtures import ROOT, make_key, new_order, seeded_database, sse_events
from writegate.approval import tracing
from writegate.approval.execution import RetryPolicy
from writegate.demo.faults import FaultScript
from writegate.demo.provider import SimulatedProvider
from writegate.demo.runtime import open_demo
from writegate.surfaces.web import create_app

LIFE = ["writegate.propose", "writegate.decide", "writegate.execute"]


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.set_provider(provider)
    try:
        yield exporter
    finally:
        tracing.set_provider(None)


def printed_spans(text: str) -> list[dict[str, Any]]:
    """The JSON objects of the console exporter's output (other output is skipped)."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while (at := text.find("{", at)) >= 0:
        try:
            value, end = decoder.raw_decode(text, at)
        except ValueError:
            at += 1
            continue
        if isinstance(value, dict) and "context" in value:
            found.append(value)
        at = end
    return found


def test_a_proposal_confirmed_over_http_and_settled_by_the_reconciler_is_one_trace(
    create_database: Callable[[], str], spans: InMemorySpanExporter
) -> None:
    url = seeded_database(create_database)
    faults = FaultScript()
    runtime = open_demo(
        url,
        setup=False,
        retry=RetryPolicy(base_delay=0.0),
        provider=SimulatedProvider(url, faults=faults),
    ).runtime
    who = {"Authorization": "Bearer " + make_key(url, "user_42")}
    order = new_order(url)
    faults.reset([f"{order}=timeout_after*3"])  # applied, but every answer lost
    try:
        with TestClient(create_app(runtime)) as client:
            thread = client.post("/v1/threads", headers=who).json()["thread_id"]
            text = f"refund 10.00 CNY of {order} because it arrived broken"
            reply = client.post(
                f"/v1/threads/{thread}/messages", headers=who, json={"content": text}
            )
            proposal_id = sse_events(reply.text)[-1][1]["pending"][0]["proposal_id"]
            client.post(
                f"/v1/approvals/{proposal_id}/decision",
                headers={**who, "Idempotency-Key": "trace-confirm"},
                json={"action": "confirm"},
            )
    finally:
        runtime.close()
    with psycopg.connect(url) as conn:
        status = conn.execute(
            "SELECT status FROM writegate.executions WHERE proposal_id = %s", (proposal_id,)
        ).fetchone()
    assert status == ("unknown",)

    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "OTEL_"))}
    env.update({"DATABASE_URL": url, "OTEL_TRACES_EXPORTER": "console"})
    reconciler = subprocess.run(
        [sys.executable, "-m", "writegate", "reconcile"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    with psycopg.connect(url) as conn:
        status = conn.execute(
            "SELECT status FROM writegate.executions WHERE proposal_id = %s", (proposal_id,)
        ).fetchone()
    assert status == ("succeeded",)

    ours = [s for s in spans.get_finished_spans() if s.name.startswith("writegate.")]
    mine = [s for s in ours if (s.attributes or {}).get("writegate.proposal_id") == proposal_id]
    assert {s.name for s in mine} >= set(LIFE), [s.name for s in ours]
    trace_id = mine[0].context.trace_id
    life = [s for s in ours if s.context.trace_id == trace_id]
    assert {s.name for s in life} >= {*LIFE, "writegate.downstream", "writegate.record"}
    settled = [s for s in printed_spans(reconciler.stdout) if s["name"] == "writegate.reconcile"]
    assert len(settled) == 1, reconciler.stdout[-2000:]
    assert int(settled[0]["context"]["trace_id"], 16) == trace_id
    assert settled[0]["attributes"]["writegate.proposal_id"] == proposal_id
    propose = next(s for s in life if s.name == "writegate.propose")
    assert int(settled[0]["parent_id"], 16) == propose.context.span_id

    values = [str(v) for s in life for v in (s.attributes or {}).values()]
    values += [str(v) for v in settled[0]["attributes"].values()]
    assert not [v for v in values if "wgt_" in v or "broken" in v], values
    assert {"writegate.request_key", "writegate.args_digest", "writegate.tenant_id"} <= {
        k for s in life for k in (s.attributes or {})
    }


def test_without_a_tracer_provider_nothing_is_traced_or_stored() -> None:
    assert not tracing.enabled()
    with tracing.span("writegate.propose", root=True, proposal_id="prop_x") as span:
        assert span is None
    assert tracing.recall(object(), proposal_id="prop_x") is None  # no database read


def test_a_secret_can_not_become_a_span_attribute(spans: InMemorySpanExporter) -> None:
    with (
        pytest.raises(ValueError, match="not a trace attribute"),
        tracing.span("writegate.execute", token="wgt_secret"),
    ):
        pass
