"""Part 1c: writegate's middleware against LangChain's, both in `create_agent`.

    create_agent(model, [refund_order], middleware=[wg.middleware()])
    create_agent(model, [refund_order], middleware=[HumanInTheLoopMiddleware(...)])

The same scripted model replies, the same tool list and the same `PostgresSaver`;
only the middleware differs. Each write is: the model proposes `refund_order`, the
middleware interrupts, the person approves (`Command(resume=...)`, each middleware's
own answer), the refund executes and the model answers once more. The two agents run
interleaved, operation by operation, and the figure is the ratio of their medians.
Needs the `langchain` extra; without it the part reports itself skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from writegate.bench import langchain_hitl
from writegate.bench.compare import interleaved_figures, run_interleaved
from writegate.bench.workload import Kind

KINDS: tuple[Kind, ...] = ("langchain_hitl", "writegate_middleware")


def run_middleware(url: str, ops: int, advance: Callable[[], None]) -> dict[str, Any]:
    if not langchain_hitl.available():
        for _ in range(ops):
            advance()
        return {"skipped": "the langchain extra is not installed (uv sync --extra langchain)"}
    samples, cpu = run_interleaved(url, KINDS, ops, advance, prefix="mw")
    return {
        "order": "interleaved, alternating which agent goes first",
        **interleaved_figures(samples, cpu, "langchain_hitl", "writegate_middleware"),
    }
