"""The notebooks run top to bottom, each on its own fresh, empty database.

They are executed with nbclient in a real Jupyter kernel, the way a person runs them with
`uv run jupyter execute notebooks/<name>.ipynb`. The kernel gets `DATABASE_URL` through its
environment and nothing else: no model key, no tables set up beforehand. The notebooks'
own `assert`s fail the test when writegate misbehaves; what writegate executed in that
database is checked here. The stored files must carry no outputs, so their diffs stay
small, and they teach the public API: they import from `writegate` and
`writegate.testing` only.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

import nbformat
import psycopg
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NAMES = (
    "quickstart.ipynb",
    "protect_your_own_tool.ipynb",
    "decline_edit_expiry.ipynb",
    "second_approver.ipynb",
)
CELL_TIMEOUT_S = 120
# Anything that would switch the notebooks from the scripted model to a real one.
MODEL_ENV = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "WRITEGATE_MODEL")
EXECUTED_SQL = """
SELECT operation, status, args FROM writegate.executions ORDER BY created_at, execution_id"""
# What writegate executed in the notebook's database, as (operation, status, the amount
# argument): the quickstart's one refund; two invoices (the approved one, asked about
# twice, and the edited one: the rejected one never ran); one refund of the edited
# amount (the declined and expired proposals never ran); the second approver's large one.
EXPECTED_EXECUTIONS = {
    "quickstart.ipynb": [("refund", "succeeded", 19900)],
    "protect_your_own_tool.ipynb": [
        ("send_invoice", "succeeded", 4800),
        ("send_invoice", "succeeded", 4500),
    ],
    "decline_edit_expiry.ipynb": [("refund", "succeeded", 5000)],
    "second_approver.ipynb": [("refund", "succeeded", 800000)],
}
AMOUNT_ARGS = ("amount_minor", "total_cents")
IMPORT = re.compile(r"^\s*(?:from|import)\s+(writegate(?:\.\w+)*)", re.M)
# Ways around the public API: the saver's own connection, writegate's tables by name.
PRIVATE = re.compile(r"\.conn\b|\bwritegate\.(?:audit|proposals|executions|tokens)\b")
ANSI = re.compile(r"\x1b\[")

pytestmark = pytest.mark.slow


def _code(name: str) -> list[nbformat.NotebookNode]:
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def test_every_notebook_is_run_here() -> None:
    assert sorted(path.name for path in NOTEBOOKS.glob("*.ipynb")) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_notebook_is_stored_without_outputs(name: str) -> None:
    code = _code(name)
    assert code, f"{name} has no code cells"
    dirty = [i for i, cell in enumerate(code) if cell.outputs or cell.execution_count]
    assert not dirty, f"{name}: clear the outputs of code cells {dirty} before committing"


@pytest.mark.parametrize("name", NAMES)
def test_notebook_imports_only_the_public_faces(name: str) -> None:
    imported = {module for cell in _code(name) for module in IMPORT.findall(cell.source)}
    deep = imported - {"writegate", "writegate.testing"}
    assert deep == set()


@pytest.mark.parametrize("name", NAMES)
def test_notebook_reads_writegate_through_its_api_not_its_tables(name: str) -> None:
    """The audit through `wg.audit()`, never SQL on writegate's tables."""
    private = [
        line.strip()
        for cell in _code(name)
        for line in cell.source.splitlines()
        if PRIVATE.search(line)
    ]
    assert private == []


@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_top_to_bottom(
    name: str, create_database: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = create_database()
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
    # What it prints reads as text wherever the file is opened: no terminal escapes.
    printed = [
        str(output.get("text", "")) + str(output.get("data", {}).get("text/plain", ""))
        for cell in notebook.cells
        for output in cell.get("outputs", [])
    ]
    assert [text for text in printed if ANSI.search(text)] == []

    # It ran against the test database, not some default one, and ran what it says.
    with psycopg.connect(url) as conn:
        rows = conn.execute(EXECUTED_SQL).fetchall()
    executed = [
        (operation, status, next(args[k] for k in AMOUNT_ARGS if k in args))
        for operation, status, args in rows
    ]
    assert executed == EXPECTED_EXECUTIONS[name]
