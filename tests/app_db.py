"""The demo application's tables for a test database: writegate's, LangGraph's
checkpoints, the HTTP service's and the demo domain's."""

from __future__ import annotations

from writegate.demo.schema import setup_demo
from writegate.surfaces.store import setup_service


def setup_app(url: str) -> None:
    setup_demo(url)
    setup_service(url)
