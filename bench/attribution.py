"""Where an operation's time goes: timers around the checkpointer, the ledger and the provider.

`TimedSaver` is LangGraph's PostgresSaver with each call timed; `instrument_runtime`
wraps the ledger service, the executor and the provider of a bench-owned Runtime.
Timings collect in a `Recorder`, read per operation. Under `durability="async"` the
saver's writes run in a background thread, so their time overlaps the next step.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata
from langgraph.checkpoint.postgres import PostgresSaver

from writegate.demo.provider import ProviderClient
from writegate.runtime.wiring import Runtime


class Recorder:
    """Thread-safe sums of seconds and counts per component, reset per operation."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.counts: defaultdict[str, int] = defaultdict(int)

    def add(self, name: str, seconds: float) -> None:
        with self._lock:
            self.seconds[name] += seconds
            self.counts[name] += 1

    def take(self) -> tuple[dict[str, float], dict[str, int]]:
        with self._lock:
            out = dict(self.seconds), dict(self.counts)
            self.seconds.clear()
            self.counts.clear()
        return out


def timed(fn: Callable[..., Any], recorder: Recorder, name: str) -> Callable[..., Any]:
    """Record the call's wall time under `name` and this thread's CPU under `name_cpu`."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started, cpu = time.perf_counter(), time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            recorder.add(name, time.perf_counter() - started)
            recorder.add(f"{name}_cpu", time.thread_time() - cpu)

    return wrapper


class TimedSaver(PostgresSaver):
    recorder: Recorder

    def get_tuple(self, config: RunnableConfig) -> Any:
        return timed(super().get_tuple, self.recorder, "ckpt_read")(config)

    def list(self, config: RunnableConfig | None, **kwargs: Any) -> Iterator[Any]:
        return timed(super().list, self.recorder, "ckpt_read")(config, **kwargs)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        if config["configurable"].get("checkpoint_ns"):  # a subgraph's own checkpoint
            self.recorder.add("ckpt_put_subgraph", 0.0)
        put = timed(super().put, self.recorder, "ckpt_put")
        return put(config, checkpoint, metadata, new_versions)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        timed(super().put_writes, self.recorder, "ckpt_writes")(config, writes, task_id, task_path)


def timed_saver(runtime: Runtime, recorder: Recorder) -> TimedSaver:
    saver = TimedSaver(runtime.pool)
    saver.recorder = recorder
    return saver


def instrument_runtime(runtime: Runtime, provider: ProviderClient, recorder: Recorder) -> None:
    """Time the ledger calls the graph makes, and the provider call inside execute.

    Every path a write may take: the graph's one-transaction confirm and execute, the
    two-step decide and execute it falls back to, a client's token, and the record of a
    question that reached a client."""
    service, executor = runtime.service, runtime.executor
    for name in ("propose", "get_proposal", "decide"):
        setattr(service, name, timed(getattr(service, name), recorder, "ledger"))
    for name in ("confirm", "execute"):
        setattr(executor, name, timed(getattr(executor, name), recorder, "ledger"))
    presented = runtime.presented
    setattr(presented, "record", timed(presented.record, recorder, "ledger"))  # noqa: B010
    setattr(provider, "refund", timed(provider.refund, recorder, "provider"))  # noqa: B010


def breakdown(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean milliseconds per component and mean calls per operation over `rows`."""
    keys = sorted({k for row in rows for k in row})
    return {k: round(statistics.fmean(row.get(k, 0.0) for row in rows), 3) for k in keys}
