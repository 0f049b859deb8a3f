"""The execution lease's default is stated once, in `approval/retry.py`; every page
that quotes it says the same figure."""

from __future__ import annotations

from pathlib import Path

import pytest

from writegate.approval.retry import DEFAULT_LEASE, RetryPolicy

DOCS = Path(__file__).resolve().parents[2] / "docs"
SECONDS = f"{DEFAULT_LEASE.total_seconds():g}"
# Where the docs quote it, each with the figure left out.
QUOTES = [
    ("downstream.md", "| `lease` | {} s |"),
    ("operations.md", "lease (in the soak; {} s by default)"),
    ("operations.md", "tools: {} s by default, 2 s in the soak"),
    ("scaling.md", "(2 s in the soak, {} s by default)"),
]


def test_the_policy_takes_its_lease_from_the_one_constant() -> None:
    assert RetryPolicy().lease == DEFAULT_LEASE


@pytest.mark.parametrize(("page", "quote"), QUOTES)
def test_the_docs_quote_the_lease_default_of_the_code(page: str, quote: str) -> None:
    text = " ".join((DOCS / page).read_text().split())  # a quote may wrap a line
    assert quote.format(SECONDS) in text, f"docs/{page} should say {quote.format(SECONDS)!r}"
