"""Every error code maps back to its class: each one `approval/errors.py` defines and
each one the docs mention, with its `retryable` flag. A stored outcome rebuilt by
`error_for_code` is the error that was raised, never a plain `internal_error`."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from writegate.approval import errors
from writegate.approval.errors import WritegateError, error_for_code

ROOT = Path(__file__).resolve().parents[2]
# Backticked names on a docs line that speaks of codes or errors, which are not codes:
# an execution status, a tool, a field.
NOT_CODES = {"failed_terminal", "get_order", "provider_ref", "your_answer_was_refused"}


def _defining_classes() -> dict[str, type[WritegateError]]:
    """Each code with the class that defines it (a subclass may reuse its parent's)."""
    found: dict[str, type[WritegateError]] = {}
    for _, cls in inspect.getmembers(errors, inspect.isclass):
        if issubclass(cls, WritegateError) and "code" in vars(cls):
            assert cls.code not in found, f"{cls.__name__} and {found[cls.code].__name__}"
            found[cls.code] = cls
    return found


CLASSES = _defining_classes()


def _documented_codes() -> dict[str, set[str]]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    codes: dict[str, set[str]] = {}
    for page in pages:
        for line in page.read_text(encoding="utf-8").splitlines():
            ticked = re.findall(r"`([a-z]+(?:_[a-z]+)+)`", line)
            # a known code wherever it is named; any name where the line speaks of codes
            named = [name for name in ticked if name in CLASSES]
            named += re.findall(r'"code":\s*"(\w+)"', line)
            if re.search(r"\b(codes?|errors?)\b", line):
                named += ticked
            for code in named:
                codes.setdefault(code, set()).add(page.name)
    return {code: pages for code, pages in codes.items() if code not in NOT_CODES}


@pytest.mark.parametrize("code", sorted(CLASSES))
def test_every_code_defined_maps_back_to_its_class(code: str) -> None:
    cls = CLASSES[code]
    rebuilt = error_for_code(code, "stored message", execution_id="exe_1")
    assert type(rebuilt) is cls
    assert rebuilt.retryable is cls.retryable
    assert rebuilt.to_dict()["retryable"] is cls.retryable
    assert rebuilt.message == "stored message" and rebuilt.details == {"execution_id": "exe_1"}


def test_a_code_two_levels_down_is_its_own_class() -> None:
    rebuilt = error_for_code("identity_conflict")
    assert type(rebuilt) is errors.IdentityConflict
    assert rebuilt.code == "identity_conflict"


def test_a_subclass_that_reuses_a_code_does_not_take_it_over() -> None:
    assert type(error_for_code("not_found")) is errors.NotFound
    assert type(error_for_code("validation_failed")) is errors.ValidationFailed


def test_every_code_the_docs_mention_is_a_class() -> None:
    documented = _documented_codes()
    unknown = {code: sorted(pages) for code, pages in documented.items() if code not in CLASSES}
    assert unknown == {}, "documented codes with no class in approval/errors.py"
    assert len(documented) >= 20  # the docs do name their codes: the scan found them


def test_an_unknown_code_is_an_internal_error() -> None:
    assert type(error_for_code("no_such_code")) is WritegateError
