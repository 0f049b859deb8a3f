"""A process that kills itself at a step boundary, for the kill suite and the soak.

`WRITEGATE_FAULT_KILL_AT=STEP@N` makes the process send itself SIGKILL the N-th time
it reaches STEP (`claimed`, `downstream_returned`, `recorded` in an executor;
`claimed`, `looked_up`, `downstream_returned` in a reconciler). Unset: no hook at all.
Like `WRITEGATE_PROVIDER_FAULTS`, it is for fault testing only.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Mapping

KILL_AT_ENV = "WRITEGATE_FAULT_KILL_AT"


def kill_hook(step: str, nth: int = 1) -> Callable[[str], None]:
    reached = 0

    def hook(name: str) -> None:
        nonlocal reached
        if name != step:
            return
        reached += 1
        if reached >= nth:
            print(f"killed at {step}", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


def kill_hook_from_env(env: Mapping[str, str] | None = None) -> Callable[[str], None] | None:
    raw = ((os.environ if env is None else env).get(KILL_AT_ENV) or "").strip()
    if not raw:
        return None
    step, _, nth = raw.partition("@")
    return kill_hook(step, int(nth) if nth.isdigit() else 1)
