"""Text a person is shown, made inert: control characters are shown, never obeyed.

A preview's title, target, impact and field displays, an error's message and a
person's reason may hold text from the model, from a person or from the application's
own data (an order's shipping address). Any of it may carry an escape sequence (ESC [,
OSC, CSI), a carriage return or backspace that redraws a line, or a bidirectional
override that reorders what is read. Printed raw, such text can hide or overwrite the
amount a person is about to confirm. So every display string is passed through
`inert_text` where it is made (`Preview.to_dict`, `Proposal`, `WritegateError.to_dict`),
and every way in (the interrupt value, the model's ToolMessage, MCP, the HTTP API and
page, the terminal) shows the same inert text. Machine values (a field's `value`, the
digested arguments) are never touched.

Inert means visible: each such character becomes its escape, `\\x1b` or `\\u202e`, so
the person sees that something odd is there instead of having it vanish.
"""

from __future__ import annotations

import re
from typing import Any

# C0 controls (tab and newline too: a display string is one line, and a newline could
# start a forged line of its own), DEL and C1 controls (0x9b is an 8-bit CSI), the
# bidirectional marks, embeddings, overrides and isolates, the Unicode line and
# paragraph separators, and lone surrogates.
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)

# What JSON's own encoder leaves raw with ensure_ascii=False: everything above but C0,
# which it always escapes.
_JSON_UNSAFE = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")

# The preview's strings a person reads; its fields' `display` and `label` are handled
# per field. `value` and `options` are machine values and stay as they are.
_PREVIEW_TEXT = ("title", "target", "impact")
_FIELD_TEXT = ("display", "label")


_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def inert_text(value: Any) -> str:
    """`value` as text whose every control character is shown as its escape.

    Idempotent: the escapes are printable, so inert text passed again is unchanged.
    """
    text = value if isinstance(value, str) else str(value)
    return _UNSAFE.sub(_escape, text) if _UNSAFE.search(text) else text


def inert_json(text: str) -> str:
    """JSON text with the characters a terminal or a renderer would obey written as
    `\\uXXXX` escapes. Such characters only occur inside JSON strings, where the escape
    decodes to the same character, so the JSON's values are exactly what they were."""
    if not _JSON_UNSAFE.search(text):
        return text
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def inert_preview(preview: dict[str, Any]) -> dict[str, Any]:
    """A copy of `preview` whose display strings are inert."""
    shown = dict(preview)
    for key in _PREVIEW_TEXT:
        if isinstance(shown.get(key), str):
            shown[key] = inert_text(shown[key])
    if isinstance(shown.get("fields"), list):
        shown["fields"] = [_inert_field(field) for field in shown["fields"]]
    return shown


def _inert_field(field: Any) -> Any:
    if not isinstance(field, dict):
        return field
    return {
        k: inert_text(v) if k in _FIELD_TEXT and isinstance(v, str) else v for k, v in field.items()
    }
