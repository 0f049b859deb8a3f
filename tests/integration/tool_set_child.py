"""One application's process, with its own tool set, for the shared-database test.

    python -m tests.integration.tool_set_child APP MODE EFFECTS_DIR   (DATABASE_URL)

APP is `shipping` (tool `ship_parcel`) or `billing` (tool `send_invoice`). MODE
`unknown` confirms one write whose answer is lost after it applied (the outcome becomes
unknown) and prints what the model was told; MODE `drain` runs this application's
reconciler once and prints what it settled. A write's effect is a file named by its
request key in EFFECTS_DIR, which is what each tool's lookup reads.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tests.integration.slow_service import confirmed_write
from writegate import Writegate, write_tool

TOOLS = {"shipping": "ship_parcel", "billing": "send_invoice"}


def app_tool(name: str, effects: Path) -> Any:
    def lookup(args: dict[str, Any], request_key: str) -> dict[str, Any] | None:
        done = effects / request_key
        return json.loads(done.read_text()) if done.exists() else None

    def write(account: str, cents: int, *, request_key: str) -> dict[str, Any]:
        """Do it.

        Args:
            account: The account id.
            cents: Amount in cents.
        """
        (effects / request_key).write_text(json.dumps({"account": account, "cents": cents}))
        raise ConnectionResetError("the connection broke after the request was sent")

    return write_tool(write, side_effect="external", lookup=lookup, name=name)


def main(app: str, mode: str, effects: str) -> None:
    name = TOOLS[app]
    with Writegate.open(tools=[app_tool(name, Path(effects))]) as wg:
        if mode == "unknown":
            args = {"account": "acct_1", "cents": 100}
            told = confirmed_write(wg, {"name": name, "args": args, "id": f"call_{app}"})
            print(json.dumps(told), flush=True)
        else:
            print(json.dumps([s.__dict__ for s in wg.reconciler().drain()]), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
