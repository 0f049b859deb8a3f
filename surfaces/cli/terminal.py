"""Text bound for a terminal, made inert: the one helper every CLI renderer uses.

Whatever a model, a user or the database supplied may carry escape sequences (ESC [,
OSC, a carriage return or backspaces that redraw the line) or rich markup (`[/x]`,
`[bold]`). Either could make the screen show something other than what executes, or
crash the renderer. So every such value is shown through `inert` (a `Text`, never
parsed as markup) or `markup_safe` (for an f-string that itself holds markup), both
of which first pass it through `clean`.
"""

from __future__ import annotations

import re
from typing import Any

from rich.markup import escape
from rich.text import Text

# C0 and C1 control characters, DEL, and the bidirectional controls that can reorder
# what is displayed; tab and newline are handled apart (they become a space).
_INVISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_LINE_BREAKS = re.compile("[\t\n]")
_SURROGATES = re.compile("[\ud800-\udfff]")


def clean(value: Any) -> str:
    """One line of printable text: control characters dropped, tab and newline made a
    space (a field can never start a line of its own), lone surrogates replaced."""
    text = value if isinstance(value, str) else str(value)
    text = _INVISIBLE.sub("", text)
    text = _LINE_BREAKS.sub(" ", text)
    return _SURROGATES.sub("\ufffd", text)


def inert(value: Any, style: str = "") -> Text:
    """A table cell or line that rich prints exactly as cleaned, markup and all."""
    return Text(clean(value), style=style)


def markup_safe(value: Any) -> str:
    """A value to place inside a markup string: cleaned, then its markup escaped."""
    return escape(clean(value))
