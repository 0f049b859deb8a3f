"""Text bound for a terminal, made inert: the one helper every CLI renderer uses.

Whatever a model, a user or the database supplied may carry escape sequences (ESC [,
OSC, a carriage return or backspaces that redraw the line) or rich markup (`[/x]`,
`[bold]`). Either could make the screen show something other than what executes, or
crash the renderer. So every such value is shown through `inert` (a `Text`, never
parsed as markup) or `markup_safe` (for an f-string that itself holds markup), both
of which first pass it through `clean`: the rule every way in shares, from
`approval/inert.py`.
"""

from __future__ import annotations

import re
from typing import Any

from rich.markup import escape
from rich.text import Text

from writegate.approval.inert import inert_text

_LINE_BREAKS = re.compile("[\t\n]")


def clean(value: Any) -> str:
    """One line of printable text: tab and newline made a space (a field can never
    start a line of its own), every other control character shown as its escape, as
    writegate shows it on every way in (`approval/inert.py`)."""
    text = value if isinstance(value, str) else str(value)
    return inert_text(_LINE_BREAKS.sub(" ", text))


def inert(value: Any, style: str = "") -> Text:
    """A table cell or line that rich prints exactly as cleaned, markup and all."""
    return Text(clean(value), style=style)


def markup_safe(value: Any) -> str:
    """A value to place inside a markup string: cleaned, then its markup escaped."""
    return escape(clean(value))
