"""Every Python block in the docs and the README runs, or says why it cannot.

A block runs unless the line before it is `<!-- fragment: why -->` (it needs an API
key, a server of its own, or names the reader's own code). The blocks of one page run
in page order in one namespace, as a reader runs them one after the other, against a
throwaway database (`DATABASE_URL`), offline. What the blocks import is checked apart
(`tests/unit/test_public_face.py`): the public faces only.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
FRAGMENT = re.compile(r"<!-- fragment: (\S.*?) -->")

pytestmark = pytest.mark.integration


def blocks(page: Path) -> list[tuple[str, str | None]]:
    """Each Python block of a page with its fragment reason (None: it runs)."""
    text = page.read_text(encoding="utf-8")
    found = []
    for match in BLOCK.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        reason = FRAGMENT.fullmatch(before.strip())
        found.append((match.group(1), reason.group(1) if reason else None))
    return found


RUNNABLE = {
    page.relative_to(REPO).as_posix(): [code for code, why in blocks(page) if why is None]
    for page in PAGES
}
RUNNABLE = {name: codes for name, codes in RUNNABLE.items() if codes}


def test_the_docs_hold_runnable_blocks_and_every_fragment_says_why() -> None:
    every = [(page, code, why) for page in PAGES for code, why in blocks(page)]
    assert sum(len(codes) for codes in RUNNABLE.values()) >= 10
    for page, _code, why in every:
        assert why is None or len(why.split()) >= 3, f"{page.name}: say why it cannot run"
    # A marker means the block right after it: one that marks nothing is a mistake.
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in FRAGMENT.finditer(text):
            after = text[match.end() :].lstrip("\n")
            assert after.startswith("```python\n"), f"{page.name}: {match.group(0)} marks no block"


@pytest.mark.parametrize("page", sorted(RUNNABLE))
def test_the_blocks_of_a_page_run_in_order(
    page: str, create_database: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", create_database())
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    namespace: dict[str, object] = {"__name__": "__docs__"}
    for number, code in enumerate(RUNNABLE[page], 1):
        exec(compile(code, f"{page} (python block {number})", "exec"), namespace)
