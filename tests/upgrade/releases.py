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
# Release 0.2.0: core migrations 1-8, the service's, the demo's; records its release.
V0_2_0 = Release("2e2a91c6c2ff977c85c071cd61d26042d708a4f5", "0.2.0")

# The previous release: the rolling-release test runs it beside today's code, and the
# approvals left waiting at its HTTP service and MCP server are answered by today's.
PREVIOUS_RELEASE = V0_2_0
# Every earlier release an upgrade is tested from, oldest first.
PREVIOUS: list[Release] = [BEFORE_SCHEMA, LAST_MAIN, PREVIOUS_RELEASE]
