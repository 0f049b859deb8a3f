"""The earlier releases the upgrade tests install and run, named here and nowhere else.

Each is a commit of this repository; `tests/upgrade/old_release.py` builds its own
environment from that commit's tree and lock file.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Release:
    commit: str
    what: str


# The layout before writegate's schema: everything in `public` (`wg_*`), adopted by
# the core's and the HTTP service's LEGACY_ADOPTION.
BEFORE_SCHEMA = Release(
    "5f1ffc8e1bf39ffdb2e852a750fa17813e611bbc", "0.1.0, tables in public (wg_*)"
)
# The last main before 0.2.0: the `writegate` schema, core migrations 1-4.
LAST_MAIN = Release("d33d9eaeeb97ca36d9f0f68ca6c9d3eb87c718ab", "0.1.0, schema writegate")

PREVIOUS: list[Release] = [BEFORE_SCHEMA, LAST_MAIN]
