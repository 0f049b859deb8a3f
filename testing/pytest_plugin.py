"""pytest plugin: a throwaway database for `check_write_tool`.

Enable it in your top-level conftest.py:

    pytest_plugins = ["writegate.testing.pytest_plugin"]

and ask for `writegate_database` (a URL). Each test gets a database of its own, made
on the server `Writegate.open()` would use (DATABASE_URL's server, else a local one,
else the embedded one; WRITEGATE_TEST_SERVER_URL, a maintenance-database URL, overrides)
and dropped afterwards. No other database on that server is touched.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from writegate.testing.database import throwaway_database


@pytest.fixture
def writegate_database() -> Iterator[str]:
    """URL of a fresh, empty database; writegate sets up its tables on first open."""
    with throwaway_database() as url:
        yield url
