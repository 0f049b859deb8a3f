"""A separate process whose confirmed write overruns its deadline, for the kill test.

    python -m tests.integration.slow_child SERVICE_URL      (DATABASE_URL: the database)

It asks, confirms, prints what the model was told as one JSON line, then waits on
stdin with its call still running, so the parent can SIGKILL it there.
"""

from __future__ import annotations

import json
import sys

from tests.integration.slow_service import DEADLINE, confirmed_write, pay_call, slow_tool
from writegate import Writegate


def main(service_url: str) -> None:
    with Writegate.open(tools=[slow_tool(service_url, retry=DEADLINE)]) as wg:
        print(json.dumps(confirmed_write(wg, pay_call())), flush=True)
        sys.stdin.readline()  # wait here, the call still running, until killed


if __name__ == "__main__":
    main(*sys.argv[1:])
