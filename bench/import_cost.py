"""What `from writegate import Writegate, write_tool` adds to the import time of what it
stands on: LangGraph's graph runtime, its Postgres saver and LangChain's `create_agent`.

Both are measured in one interpreter with `python -X importtime`: first theirs, then
ours, with a marker line between them on stderr. Each side is the sum of the cumulative
times of the imports it set off at the top level, so ours counts only what writegate
adds on top of theirs (its own modules and anything they bring that theirs did not).
The ratio of the two comes from one process on one machine at one moment, so a busy
machine slows both; `python -m writegate.bench.import_cost` prints a few runs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass

THEIRS = "import langgraph.graph, langgraph.checkpoint.postgres, langchain.agents"
OURS = "from writegate import Writegate, write_tool"
MARKER = "@@writegate-import-cost"
# `import time: self [us] | cumulative | imported package`; the name is indented by depth.
_LINE = re.compile(r"import time:\s+\d+ \|\s+(\d+) \|( +)(\S+)")


@dataclass(frozen=True)
class ImportCost:
    """One run's figures, in microseconds, and the modules ours loaded on top of theirs."""

    theirs_us: int
    ours_us: int
    ours_modules: tuple[str, ...]

    @property
    def ratio(self) -> float:
        return self.ours_us / self.theirs_us

    def __str__(self) -> str:
        return (
            f"theirs {self.theirs_us / 1000:.0f} ms, ours on top {self.ours_us / 1000:.0f} ms "
            f"({self.ratio:.1%}, {len(self.ours_modules)} modules)"
        )


def parse(stderr: str) -> ImportCost:
    """The figures from one `-X importtime` run of `THEIRS`, the marker, then `OURS`."""
    totals, modules, after = [0, 0], [], False
    for line in stderr.splitlines():
        if line.startswith(MARKER):
            after = True
            continue
        found = _LINE.match(line)
        if found is None:
            continue
        if after:
            modules.append(found.group(3))
        if len(found.group(2)) == 1:  # top level: its cumulative time covers its children
            totals[int(after)] += int(found.group(1))
    if not after or not totals[0]:
        raise ValueError(f"no import-time figures on both sides of the marker:\n{stderr[-2000:]}")
    return ImportCost(totals[0], totals[1], tuple(modules))


def measure(python: str = sys.executable) -> ImportCost:
    """Run both imports once in a fresh `python`, outside any source tree."""
    code = f"{THEIRS}\nimport sys\nsys.stderr.write({MARKER!r} + '\\n')\n{OURS}\n"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    with tempfile.TemporaryDirectory() as where:
        done = subprocess.run(
            [python, "-X", "importtime", "-c", code],
            capture_output=True,
            text=True,
            cwd=where,
            env=env,
            timeout=300,
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"the import failed:\n{done.stderr[-2000:]}")
    return parse(done.stderr)


def main(runs: int = 5) -> None:
    measure()  # the first run may write bytecode caches; it is not counted
    costs = [measure() for _ in range(runs)]
    for number, cost in enumerate(costs, start=1):
        print(f"run {number}: {cost}")
    ratios = sorted(cost.ratio for cost in costs)
    print(f"ours / theirs: median {ratios[len(ratios) // 2]:.1%}, lowest {ratios[0]:.1%}")


if __name__ == "__main__":
    main()
