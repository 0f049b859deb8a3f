"""The embedded server's folder is anchored, and dead pids never keep it running."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from writegate.checkpoints import data_home as home
from writegate.checkpoints.database import embedded_data_dir

REPO = Path(home.__file__).resolve().parent.parent


def test_data_folder_is_the_same_from_any_working_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("WRITEGATE_HOME", raising=False)
    monkeypatch.chdir(REPO)
    from_root = embedded_data_dir()
    monkeypatch.chdir(REPO / "notebooks")  # where a notebook kernel starts
    assert embedded_data_dir() == from_root == REPO / ".writegate" / "pgdata"
    monkeypatch.chdir(tmp_path)
    assert embedded_data_dir() == from_root


def test_writegate_home_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WRITEGATE_HOME", str(tmp_path / "wg"))
    assert embedded_data_dir() == tmp_path / "wg" / "pgdata"


def test_an_installed_package_uses_the_users_data_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("WRITEGATE_HOME", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "share"))
    assert home.source_checkout(tmp_path) is None  # no pyproject there: not a checkout
    monkeypatch.setattr(home, "source_checkout", lambda: None)
    if sys.platform.startswith("linux"):
        assert embedded_data_dir() == tmp_path / "share" / "writegate" / "pgdata"


def test_dead_pids_are_pruned_from_the_handle_list(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: this pid names no process now
    (tmp_path / home.HANDLE_PIDS_FILE).write_text(json.dumps([child.pid, 1, 999_999_999]))
    assert sorted(home.prune_dead_pids(tmp_path)) == sorted([child.pid, 999_999_999])
    assert json.loads((tmp_path / home.HANDLE_PIDS_FILE).read_text()) == [1]
    assert home.prune_dead_pids(tmp_path) == []  # nothing more to drop


def test_a_missing_or_broken_handle_list_is_left_alone(tmp_path: Path) -> None:
    assert home.prune_dead_pids(tmp_path) == []
    (tmp_path / home.HANDLE_PIDS_FILE).write_text("{not json")
    assert home.prune_dead_pids(tmp_path) == []
