"""The notebooks run top to bottom, each on its own fresh database.

They are executed with nbclient in a real Jupyter kernel, the way a person runs them with
`uv run jupyter execute notebooks/<name>.ipynb`. The kernel gets `DATABASE_URL` through its
environment; the notebooks' own `assert`s fail the test when writegate misbehaves. The
stored files must carry no outputs, so their diffs stay small.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import nbformat
import psycopg
import pytest
from nbclient import NotebookClient

from tests.app_db import setup_app

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NAMES = ("quickstart.ipynb", "decline_edit_expiry.ipynb", "second_approver.ipynb")
CELL_TIMEOUT_S = 120
# Anything that would switch the notebooks from the scripted model to a real one.
MODEL_ENV = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "WRITEGATE_MODEL")
REFUNDS_SQL = "SELECT amount_minor FROM provider.refunds WHERE order_id = %s"
# What reached the simulated provider for ord_1001 after each notebook: one full refund;
# one refund of the edited amount (the declined and expired proposals never ran).
# second_approver refunds an order of its own; ord_1001 stays untouched there.
EXPECTED_REFUNDS = {
    "quickstart.ipynb": [19900],
    "decline_edit_expiry.ipynb": [5000],
    "second_approver.ipynb": [],
}

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", NAMES)
def test_notebook_is_stored_without_outputs(name: str) -> None:
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code, f"{name} has no code cells"
    dirty = [i for i, cell in enumerate(code) if cell.outputs or cell.execution_count]
    assert not dirty, f"{name}: clear the outputs of code cells {dirty} before committing"


@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_top_to_bottom(
    name: str, create_database: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = create_database()
    setup_app(url)
    monkeypatch.setenv("DATABASE_URL", url)  # the kernel inherits this environment
    for var in MODEL_ENV:
        monkeypatch.delenv(var, raising=False)
    # The kernel spec runs "python": make it this environment's interpreter.
    bin_dir = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", os.pathsep.join([bin_dir, os.environ.get("PATH", "")]))

    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    client.execute()  # raises CellExecutionError, with the cell and traceback, on failure

    # It ran against the test database, not some default one.
    with psycopg.connect(url) as conn:
        rows = conn.execute(REFUNDS_SQL, ("ord_1001",)).fetchall()
    assert [amount for (amount,) in rows] == EXPECTED_REFUNDS[name]
