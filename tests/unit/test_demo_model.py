"""The demo's scripted model reads two of the library's wire names as any application
would, by value: they agree with the library's own."""

from __future__ import annotations

from writegate.approval.errors import UNSETTLED_CODES
from writegate.demo import scripted_rules
from writegate.demo.scripted import SETTLED
from writegate.graph.settled import MARK


def test_the_demo_reads_the_settled_note_by_the_agents_own_mark() -> None:
    assert SETTLED == MARK


def test_the_demo_knows_the_unsettled_codes_the_library_has() -> None:
    assert scripted_rules.UNSETTLED_CODES == UNSETTLED_CODES
