"""A small run of the randomized kill soak (tests/integration/soak.py): two replicas,
two reconcilers, processes killed at step boundaries and the provider killed; no
operation is lost or done twice. The full soak is one command (docs/operations.md)."""

from __future__ import annotations

import os

import pytest

from tests.integration.soak import run_soak

# Starting five processes and restarting the killed ones takes minutes on a busy
# 2-core machine (4 min 43 s measured), far over the suite's budget: opt in.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("WRITEGATE_SOAK") != "1", reason="set WRITEGATE_SOAK=1 to run the soak"
    ),
]

SEED = 11


def test_a_small_kill_soak_loses_nothing_and_duplicates_nothing(test_server_url: str) -> None:
    figures = run_soak(test_server_url, operations=2, seed=SEED)
    print(figures.line(SEED))
    assert figures.operations == 2
    assert figures.check["approved"] == 2
    assert figures.check["duplicates"] == 0
    assert figures.check["lost"] == 0
    assert sum(figures.kills.values()) >= 1
