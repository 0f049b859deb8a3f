"""`server_agent` on a real database: the `Writegate` opens on the first run, once, and
serves every run after it."""

from __future__ import annotations

import secrets
from collections.abc import Callable

from langchain_core.messages import HumanMessage

from tests.integration.library_helpers import (
    balance,
    last_tool,
    new_account,
    run_config,
    scripted,
    tool_call,
)
from writegate import Writegate, server_agent


def test_the_writegate_opens_on_the_first_run_once(create_database: Callable[[], str]) -> None:
    url = create_database()
    opened: list[Writegate] = []

    def open_writegate() -> Writegate:
        opened.append(Writegate.open(url, tools=[balance]))
        return opened[-1]

    account = new_account()
    turns = [[tool_call("balance", account=account)], "ok"]
    graph = server_agent(open_writegate, scripted(*turns, *turns))
    assert opened == []  # compiled: nothing opened
    try:
        for _ in range(2):
            thread_id = f"thread_{secrets.token_hex(4)}"
            out = graph.invoke({"messages": [HumanMessage("balance")]}, run_config(thread_id))
            assert last_tool(out) == {"status": "ok", "account": account, "payments": 0}
        assert len(opened) == 1
    finally:
        for wg in opened:
            wg.close()
