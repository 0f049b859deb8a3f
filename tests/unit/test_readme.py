"""The README's "Use it in your agent" example: 25 lines or fewer of valid Python,
using only the public names."""

from __future__ import annotations

import ast
import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def _example() -> str:
    section = README.read_text().split("## Use it in your agent", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    return str(block)


def test_the_use_it_in_your_agent_example_is_short_valid_and_public() -> None:
    code = _example()
    assert len(code.strip().splitlines()) <= 25
    tree = ast.parse(code)
    from_writegate = [
        node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
        and node.module.startswith("writegate")
    ]  # fmt: skip
    assert [node.module for node in from_writegate] == ["writegate"]
    assert {alias.name for alias in from_writegate[0].names} <= {"Writegate", "write_tool"}
    assert "wg.middleware()" in code and "request_key" in code
