"""`wg.middleware()` needs LangChain v1 (the `[langchain]` extra); the core does not."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from writegate import Writegate


def test_without_langchain_middleware_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = [name for name in sys.modules if name.split(".")[0] == "langchain"]
    for name in {"langchain", *loaded}:  # as if it were not installed
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "writegate.graph.middleware", raising=False)
    wg = Writegate(runtime=Any, tools=[])  # type: ignore[arg-type]
    with pytest.raises(ImportError, match=r"writegate\[langchain\]"):
        wg.middleware()


def test_the_core_does_not_import_langchain() -> None:
    code = "import sys, writegate.runtime.writegate; print('langchain' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
