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
from langgraph.checkpoint.base import CheckpointTuple, DeltaChannelHistory
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
