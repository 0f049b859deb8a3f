"""The one rule for text a person is shown: controls are shown as escapes, never obeyed,
and machine values are never touched."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from writegate.approval.errors import Declined, ValidationFailed
from writegate.approval.inert import inert_json, inert_preview, inert_text
from writegate.approval.models import Preview, SideEffect

HOSTILE = "a\x1b[2A\r\x1b[8m\x9b2K\u202egnp\u2066x\x00\x7f\u2028"


def test_every_control_is_shown_as_its_escape() -> None:
    assert inert_text(HOSTILE) == ("a\\x1b[2A\\r\\x1b[8m\\x9b2K\\u202egnp\\u2066x\\x00\\x7f\\u2028")
    assert inert_text("line\nnext\ttab") == "line\\nnext\\ttab"


def test_ordinary_text_is_left_as_it_is() -> None:
    for text in ("¥199.00 to 张三", "Zoë's café", "שלום", "👩‍💻 emoji with a joiner"):
        assert inert_text(text) == text


@given(st.text())
def test_inert_text_is_idempotent_and_printable(text: str) -> None:
    once = inert_text(text)
    assert inert_text(once) == once
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in once)
    assert "\u202e" not in once and "\u2066" not in once


@given(st.dictionaries(st.text(), st.text() | st.integers()))
def test_inert_json_keeps_the_values(value: dict[str, object]) -> None:
    text = inert_json(json.dumps(value, ensure_ascii=False))
    assert json.loads(text) == value
    assert not any(0x7F <= ord(c) <= 0x9F or c in "\u202e\u2066\u2028" for c in text)


def test_a_preview_shows_its_text_inert_and_keeps_its_machine_values() -> None:
    field = {"name": "to", "value": HOSTILE, "display": HOSTILE, "label": HOSTILE}
    field["options"] = [HOSTILE]
    preview = Preview(
        title=HOSTILE,
        operation="send",
        target=HOSTILE,
        fields=[field],
        impact=HOSTILE,
        side_effect=SideEffect.EXTERNAL,
        irreversible=False,
        external=True,
    ).to_dict()
    for key in ("title", "target", "impact"):
        assert preview[key] == inert_text(HOSTILE)
    (shown,) = preview["fields"]
    assert shown["display"] == shown["label"] == inert_text(HOSTILE)
    assert shown["value"] == HOSTILE and shown["options"] == [HOSTILE]  # machine values
    assert field["display"] == HOSTILE  # the caller's dict is not changed in place
    assert inert_preview(preview) == preview


def test_error_messages_and_a_persons_reason_are_inert() -> None:
    error = ValidationFailed(f"bad value {HOSTILE}", field="x")
    assert error.message == f"bad value {inert_text(HOSTILE)}" and str(error) == error.message
    said = Declined(person_said=HOSTILE).to_dict()
    assert said["details"]["person_said"] == inert_text(HOSTILE)
