"""`server_agent`: the graph compiles without a database; the `Writegate` opens on the
first use, once."""

from __future__ import annotations

from writegate import Writegate, server_agent
from writegate.testing import ScriptedChatModel


def test_compiling_opens_nothing_and_takes_no_checkpointer() -> None:
    opened: list[str] = []

    def open_writegate() -> Writegate:
        opened.append("opened")
        raise AssertionError("compiling must not open the database")

    graph = server_agent(open_writegate, ScriptedChatModel())
    assert graph.checkpointer is None  # the server brings its own
    assert graph.get_graph().nodes  # its schema and nodes are served without a database
    assert opened == []
