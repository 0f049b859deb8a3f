"""A test that needs a missing system package skips, saying which and how to install
it; under CI=true (where .ci/run installs them all) that skip fails the run."""

from __future__ import annotations

import pytest

from tests.system_packages import fail_on_ci, missing


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
