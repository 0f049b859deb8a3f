"""Protect an email-sending tool with `wg.middleware()` in LangChain v1's `create_agent`.

`send_email` delivers through an SMTP server. The operation's request key travels in
the message: its hash is the `Message-ID` and the key itself an `X-Request-Key` header,
so the mail side can drop a repeat. Before it connects, the tool writes the key to a
local sent-log, and marks it accepted once the server said 250; `lookup` reads that
log honestly: no entry means the server was never contacted (safe to send again with
the same key), "accepted" means it was delivered, and "sending" means nobody can tell,
so the lookup refuses to guess and the write goes to a person, never sent twice.

Run it: `uv run python examples/email_agent.py` (DATABASE_URL or a local server; the
mail server here is a stand-in on 127.0.0.1, from the dev dependency aiosmtpd).
"""

from __future__ import annotations

import email
import hashlib
import smtplib
import socket
import sqlite3
import threading
from contextlib import closing
from email.message import EmailMessage, Message
from typing import Any

from aiosmtpd.controller import Controller
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.types import Command

from writegate import PreviewField, ToolPreview, Writegate, write_tool

SENDER = "assistant@example.com"

# -- a stand-in for the mail server -----------------------------------------------------


def _free_port() -> int:
    with closing(socket.socket()) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Mailbox:
    """An SMTP server on 127.0.0.1: every message it was handed, and those it delivered
    (a repeated Message-ID is accepted but not delivered again)."""

    def __init__(self) -> None:
        self.received: list[Message] = []  # every DATA the server answered
        self.delivered: list[Message] = []
        self.lock = threading.Lock()
        self.port = _free_port()
        self.controller = Controller(self, hostname="127.0.0.1", port=self.port)

    def start(self) -> Mailbox:
        self.controller.start()
        return self

    def stop(self) -> None:
        self.controller.stop()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message = email.message_from_bytes(envelope.original_content or envelope.content)
        with self.lock:
            self.received.append(message)
            seen = {m["Message-ID"] for m in self.delivered}
            if message["Message-ID"] not in seen:
                self.delivered.append(message)
        return "250 OK"


# -- the sender's own record of what it handed to the server ----------------------------

CREATE_SQL = """
CREATE TABLE IF NOT EXISTS sent (
    request_key TEXT PRIMARY KEY, message_id TEXT NOT NULL, state TEXT NOT NULL)"""
BEGIN_SQL = "INSERT OR IGNORE INTO sent (request_key, message_id, state) VALUES (?, ?, 'sending')"
ACCEPTED_SQL = "UPDATE sent SET state = 'accepted' WHERE request_key = ?"
FIND_SQL = "SELECT message_id, state FROM sent WHERE request_key = ?"


class SendingUnsettled(RuntimeError):
    """The server was contacted and never answered: it may or may not have the mail."""


class SentLog:
    """A local SQLite log keyed by request key: 'sending' before the SMTP connection,
    'accepted' after the server's 250."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._run(CREATE_SQL)

    def _run(self, sql: str, *params: str) -> list[tuple[str, str]]:
        with closing(sqlite3.connect(self.path)) as conn, conn:
            return list(conn.execute(sql, params).fetchall())

    def sending(self, request_key: str, message_id: str) -> None:
        self._run(BEGIN_SQL, request_key, message_id)

    def accepted(self, request_key: str) -> None:
        self._run(ACCEPTED_SQL, request_key)

    def lookup(self, args: dict[str, Any], request_key: str) -> dict[str, Any] | None:
        rows = self._run(FIND_SQL, request_key)
        if not rows:
            return None  # never handed to the server: sending again is safe
        message_id, state = rows[0]
        if state != "accepted":
            raise SendingUnsettled(f"{message_id}: handed to the server, no answer recorded")
        return {"to": args["to"], "message_id": message_id}


# -- the tool, declared with the public API ---------------------------------------------


def message_id(request_key: str) -> str:
    """One Message-ID per operation: every retry of it carries the same one."""
    return f"<{hashlib.sha256(request_key.encode()).hexdigest()[:32]}@example.com>"


def email_tools(smtp_port: int, sent_log: SentLog, smtp_host: str = "127.0.0.1") -> list[Any]:
    def preview(args: dict[str, Any]) -> ToolPreview:
        return ToolPreview(
            fields=[
                PreviewField("to", args["to"]),
                PreviewField("subject", args["subject"]),
                PreviewField("body", args["body"]),
            ],
            impact=f"An email goes out to {args['to']}; it cannot be called back.",
        )

    @write_tool(
        side_effect="external",
        resource=lambda args: f"mailbox:{args['to']}",
        preview=preview,
        lookup=sent_log.lookup,
    )
    def send_email(to: str, subject: str, body: str, *, request_key: str) -> dict[str, Any]:
        """Send a plain-text email.

        Args:
            to: The recipient's address, e.g. bob@example.com.
            subject: The subject line.
            body: The message text.
        """
        message = EmailMessage()
        message["From"], message["To"], message["Subject"] = SENDER, to, subject
        message["Message-ID"] = message_id(request_key)
        message["X-Request-Key"] = request_key
        message.set_content(body)
        sent_log.sending(request_key, message["Message-ID"])
        with smtplib.SMTP(smtp_host, smtp_port, timeout=10) as smtp:
            smtp.send_message(message)
        sent_log.accepted(request_key)
        return {"to": to, "message_id": message["Message-ID"]}

    return [send_email]


def build(wg: Writegate, model: BaseChatModel, checkpointer: Any = None) -> Any:
    """LangChain's own agent loop, with writegate's middleware in front of the tools."""
    return create_agent(
        model,
        tools=wg.tools,
        middleware=[wg.middleware()],
        checkpointer=checkpointer or wg.checkpointer,
    )


def email_call(to: str = "bob@example.com", call_id: str = "call_mail_1") -> dict[str, Any]:
    args = {"to": to, "subject": "Lunch", "body": "Lunch at 1?"}
    return {"name": "send_email", "args": args, "id": call_id, "type": "tool_call"}


def main() -> None:
    import tempfile

    from writegate.testing import ScriptedChatModel

    mailbox = Mailbox().start()
    model = ScriptedChatModel(script=[AIMessage("", tool_calls=[email_call()]), AIMessage("Sent.")])
    config = {"configurable": {"thread_id": "email-example", "user_id": "u1", "tenant_id": "t1"}}
    with (
        tempfile.TemporaryDirectory() as tmp,
        Writegate.open(tools=email_tools(mailbox.port, SentLog(f"{tmp}/sent.sqlite"))) as wg,
    ):
        agent = build(wg, model)
        out = agent.invoke({"messages": [HumanMessage("Ask Bob about lunch")]}, config)
        question = out["__interrupt__"][0].value
        print("asked:", question["preview"]["title"], question["preview"]["fields"])
        out = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config)
        print("tool said:", out["messages"][-2].content)
    print("emails received:", len(mailbox.received))
    mailbox.stop()


if __name__ == "__main__":
    main()
