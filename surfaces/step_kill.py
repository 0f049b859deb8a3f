"""A process that kills itself at a step boundary, for the kill suite and the soak.

`WRITEGATE_FAULT_KILL_AT=STEP@N` makes the process send itself SIGKILL the N-th time
it reaches STEP (`claimed`, `downstream_returned`, `recorded` in an executor;
`claimed`, `looked_up`, `downstream_returned` in a reconciler). Unset: no hook at all.
Like `WRITEGATE_PROVIDER_FAULTS`, it is for fault testing only.

`WRITEGATE_FAULT_HOLD_DIR=DIR` makes the process stop at a step while the test does
something to the world (the failover soak kills the database's primary there): at
STEP, if the file `DIR/arm-STEP` exists, the first process to rename it to
`DIR/held-STEP` waits until that file is gone (at most `HOLD_S`), then goes on.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

KILL_AT_ENV = "WRITEGATE_FAULT_KILL_AT"
HOLD_DIR_ENV = "WRITEGATE_FAULT_HOLD_DIR"
HOLD_S = 60.0


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


def hold_hook(directory: str) -> Callable[[str], None]:
    def hook(name: str) -> None:
        armed, held = Path(directory, f"arm-{name}"), Path(directory, f"held-{name}")
        try:
            armed.rename(held)  # atomic: one process, one pass, takes the hold
        except OSError:
            return
        end = time.monotonic() + HOLD_S
        while held.exists() and time.monotonic() < end:
            time.sleep(0.01)

    return hook


def kill_hook_from_env(env: Mapping[str, str] | None = None) -> Callable[[str], None] | None:
    """The step hook the environment asks for (a kill, a hold, or both), or None."""
    env = os.environ if env is None else env
    hooks: list[Callable[[str], None]] = []
    raw = (env.get(KILL_AT_ENV) or "").strip()
    if raw:
        step, _, nth = raw.partition("@")
        hooks.append(kill_hook(step, int(nth) if nth.isdigit() else 1))
    directory = (env.get(HOLD_DIR_ENV) or "").strip()
    if directory:
        hooks.append(hold_hook(directory))
    if not hooks:
        return None

    def hook(name: str) -> None:
        for each in hooks:
            each(name)

    return hook
