"""A test that needs a missing system package skips, saying which and how to install
it; under CI=true (where .ci/run installs them all) that skip fails the run."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests import system_packages
from tests.integration import ha_cluster
from tests.system_packages import browser_missing, fail_on_ci, missing, tools_missing

ROOT = Path(__file__).resolve().parents[2]


def _skipped(reason: str) -> pytest.TestReport:
    return pytest.TestReport(
        "tests/x.py::test_x", ("tests/x.py", 1, "test_x"), {}, "skipped",
        ("tests/x.py", 1, f"Skipped: {reason}"), "setup",
    )  # fmt: skip


def test_the_reason_names_the_package_and_its_install_line() -> None:
    reason = missing("curl jq", "the walkthrough")
    assert "curl jq (the walkthrough)" in reason and reason.endswith("apt-get install curl jq")


def test_under_ci_a_missing_package_skip_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    report = _skipped(missing("chromium", "the browser tests"))
    fail_on_ci(report)
    assert report.failed
    assert str(report.longrepr).startswith("CI=true, yet missing system package chromium")


def test_under_ci_other_skips_stay_skips(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    report = _skipped("WRITEGATE_TEST_SERVER_URL names a server on another machine, db.example")
    fail_on_ci(report)
    assert report.skipped


def test_off_ci_a_missing_package_skip_stays_a_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    report = _skipped(missing("chromium", "the browser tests"))
    fail_on_ci(report)
    assert report.skipped


def test_ci_installs_every_package_a_skip_can_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a machine with none of them, each skip names its packages: .ci/run installs all."""
    (listed,) = re.findall(r"^APT_PACKAGES=\((.*)\)$", (ROOT / ".ci/run").read_text(), re.M)
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    monkeypatch.setattr(system_packages, "_runs", lambda _path: False)
    monkeypatch.setattr(system_packages.glob, "glob", lambda *_args, **_kw: [])
    tools = {  # the commands of every tools_missing call in the tests
        tuple(re.findall(r'"([^"]+)"', found))
        for path in (ROOT / "tests").rglob("*.py")
        for found in re.findall(r"tools_missing\(\(([^)]*)\)", path.read_text())
    }
    reasons = [browser_missing(), ha_cluster.available()]
    reasons += [tools_missing(names, "a test") for names in tools]
    named = {pkg for reason in reasons for pkg in str(reason).split("apt-get install ")[1].split()}
    assert {"chromium", "fonts-noto-cjk", "curl", "jq"} <= named
    assert named <= set(listed.split()), sorted(named - set(listed.split()))
