"""LangGraph's Postgres checkpointer, with a database outage told as writegate tells it.

`PostgresSaver` lets the driver's errors through; a thread whose checkpoint cannot be
read or written while the database is away would surface a psycopg traceback from
`graph.invoke`. This subclass changes nothing else: the same SQL, the same tables,
and an outage leaves every method as `TemporarilyUnavailable` (see `outage.py`).
The thread keeps its last checkpoint, so invoking it again continues from there.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, DeltaChannelHistory, copy_checkpoint
from langgraph.checkpoint.postgres import PostgresSaver

from writegate.checkpoints.outage import outage_mapped


class Saver(PostgresSaver):
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        with outage_mapped():
            return super().get_tuple(config)

    def list(self, *args: Any, **kwargs: Any) -> Iterator[CheckpointTuple]:
        with outage_mapped():
            yield from super().list(*args, **kwargs)

    def put(self, *args: Any, **kwargs: Any) -> RunnableConfig:
        with outage_mapped():
            return super().put(*args, **kwargs)

    def put_writes(self, *args: Any, **kwargs: Any) -> None:
        with outage_mapped():
            super().put_writes(*args, **kwargs)

    def delete_thread(self, thread_id: str) -> None:
        with outage_mapped():
            super().delete_thread(thread_id)

    def get_delta_channel_history(self, **kwargs: Any) -> Mapping[str, DeltaChannelHistory]:
        with outage_mapped():
            return super().get_delta_channel_history(**kwargs)


class Primed(Saver):
    """`saver`, on the same connections, except that the first read of its thread's
    latest checkpoint is answered with `saved`, a checkpoint its caller has just read
    (`None`: the thread has none yet). For a run that holds its thread's lock and
    starts from what it read as it took it: nothing else writes the thread meanwhile,
    so reading it again would find the same. Every later read goes to the database."""

    def __init__(self, saver: PostgresSaver, thread_id: str, saved: CheckpointTuple | None):
        super().__init__(saver.conn, saver.pipe, serde=saver.serde)
        self._thread_id = thread_id
        self._saved: list[CheckpointTuple | None] = [saved]  # emptied by the first read

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = config.get("configurable", {})
        latest = not conf.get("checkpoint_ns") and not conf.get("checkpoint_id")
        if self._saved and latest and conf.get("thread_id") == self._thread_id:
            return self._saved.pop()
        return super().get_tuple(config)


def copied(saved: CheckpointTuple | None) -> CheckpointTuple | None:
    """`saved` with a checkpoint of its own: LangGraph updates a checkpoint it reads in
    place (its versions), so two readers of one tuple are given a copy each."""
    return saved and saved._replace(checkpoint=copy_checkpoint(saved.checkpoint))
