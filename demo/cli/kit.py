"""What the `writegate` command hands the demo's commands: its consoles, its way of
resolving the database, and how it shows writegate's values and asks its questions.

The demo's commands join the `writegate` command, so they print as its other commands
do, through the same consoles (a test that narrows the console narrows theirs too) and
the same renderers. Those belong to the command line (`writegate.surfaces.cli`), which
the demo never imports: the composition point (`writegate.console`) builds a
`CommandLine` from them and hands it to each of the demo's `register` functions, as it
hands the surfaces the demo as a value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage
    from rich.console import Console, RenderableType

    from writegate import ProposalView


class Titled(Protocol):
    """A renderer of one value under a title of the caller's."""

    def __call__(self, value: Mapping[str, Any], /, *, title: str = ...) -> RenderableType: ...


class Rows(Protocol):
    """A renderer of rows under a title."""

    def __call__(self, rows: Iterable[Mapping[str, Any]], *, title: str) -> RenderableType: ...


class Messages(Protocol):
    """Prints a conversation's messages; `context` (the whole thread) supplies the
    receipts of calls whose results fall outside `messages`."""

    def __call__(
        self,
        console: Console,
        messages: Iterable[BaseMessage],
        context: Iterable[BaseMessage] | None = None,
    ) -> None: ...


@dataclass(frozen=True)
class CommandLine:
    """The `writegate` command's consoles, database and terminal rendering."""

    console: Console
    err_console: Console
    database_url: Callable[[], str]
    """The database the command acts on, or exit 2 with what to set."""
    reported_errors: Callable[[Console], AbstractContextManager[None]]
    """Setup and protocol failures shown as a structured error, exit 2, no traceback."""
    markup_safe: Callable[[Any], str]
    """A value made safe inside a markup string: cleaned, its markup escaped."""
    preview_table: Callable[[Mapping[str, Any]], RenderableType]
    """An approval request (the interrupt value) as the person sees it."""
    proposal_table: Callable[[ProposalView], RenderableType]
    """A proposal as its question shows it."""
    error_panel: Titled
    receipt_panel: Titled
    audit_table: Rows
    print_messages: Messages
    read_line: Callable[[str], str]
    """A line typed by the person; one with control characters is refused, not sent."""
    answer_all: Callable[[list[tuple[str, Any]]], dict[str, Any]]
    """Each (interrupt id, approval request) asked at its own prompt; the answers."""
    left: type[Exception]
    """Raised by `read_line` and `answer_all` when the person leaves (Ctrl-D, "later")."""
