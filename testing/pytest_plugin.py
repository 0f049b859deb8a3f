"""pytest plugin: a throwaway database for `check_write_tool`.

Enable it in your top-level conftest.py:

    pytest_plugins = ["writegate.testing.pytest_plugin"]

and ask for `writegate_database` (a URL). Each test gets a database of its own,
created on the server named by WRITEGATE_TEST_SERVER_URL (a maintenance-database URL
of a role that may create databases; default: postgres on 127.0.0.1:5432) and dropped
afterwards. No other database on that server is touched.
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
