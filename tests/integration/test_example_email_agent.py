"""The middleware example: `create_agent` sending email through a real SMTP server on
127.0.0.1. One confirm gives exactly one email; a second confirm, a replay, a killed
process resumed from a new one, or a sender killed mid-delivery sends nothing more."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.types import Command

from examples.email_agent import Mailbox, SentLog, build, email_call, email_tools, message_id
from tests.integration.fault_scripts.harness import wait_until
from writegate import RetryPolicy, Writegate
from writegate.approval.reconcile import ReconcilePolicy
from writegate.graph.scripted import ScriptedChatModel

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CHILD = "tests.integration.email_child"
DEADLINE_S = 60.0
CONFIG = {"configurable": {"thread_id": "", "user_id": "u1", "tenant_id": "t1"}}
ESCALATION_SQL = "SELECT escalation FROM writegate.executions"
LEASE_EXPIRED_SQL = (
    "SELECT bool_and(lease_expires_at <= now()) AS expired FROM writegate.executions"
)
STATUS_SQL = "SELECT status FROM writegate.executions"
# The 10 s deadline against a server that stalls 11 s, scaled down.
ONE_SECOND = RetryPolicy(call_timeout=1.0, lease=timedelta(seconds=3))


class HoldingMailbox(Mailbox):
    """Takes the message, then keeps the sender waiting for its 250 until released."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        answer = await super().handle_DATA(server, session, envelope)
        await asyncio.to_thread(self.release.wait, DEADLINE_S)
        return answer


@pytest.fixture
def mailbox() -> Iterator[Mailbox]:
    box = HoldingMailbox().start()
    box.release.set()  # answers at once unless a test clears it
    yield box
    box.release.set()
    box.stop()


@pytest.fixture
def log_path(tmp_path: Path) -> str:
    return str(tmp_path / "sent.sqlite")


@pytest.fixture
def wg(create_database: Callable[[], str], mailbox: Mailbox, log_path: str) -> Iterator[Writegate]:
    tools = email_tools(mailbox.port, SentLog(log_path))
    with Writegate.open(create_database(), tools=tools) as gate:
        yield gate


def config(thread: str) -> dict[str, Any]:
    return {"configurable": {**CONFIG["configurable"], "thread_id": thread}}


def ask(wg: Writegate, thread: str) -> tuple[Any, Any]:
    script = [AIMessage("", tool_calls=[email_call()]), *[AIMessage("Sent.")] * 3]
    agent = build(wg, ScriptedChatModel(script=script))
    out = agent.invoke({"messages": [HumanMessage("Ask Bob about lunch")]}, config(thread))
    (question,) = out["__interrupt__"]
    return agent, question


def confirm(proposal_id: str) -> dict[str, Any]:
    return {"action": "confirm", "proposal_id": proposal_id}


def receipts(out: dict[str, Any]) -> list[Any]:
    return [json.loads(str(m.content)) for m in out["messages"] if isinstance(m, ToolMessage)]


def child(mode: str, thread: str, wg: Writegate, mailbox: Mailbox, log: str, *extra: str) -> Any:
    return subprocess.Popen(
        [sys.executable, "-m", CHILD, mode, thread, str(mailbox.port), log, *extra],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": wg.runtime.url},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def report(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 0, err[-3000:]
    answer: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return answer


def kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=DEADLINE_S)
    assert proc.returncode == -signal.SIGKILL


def test_one_confirm_sends_one_email_carrying_its_request_key(
    wg: Writegate, mailbox: Mailbox
) -> None:
    agent, question = ask(wg, "mail_once")
    assert question.value["operation"] == "send_email"
    assert [f["value"] for f in question.value["preview"]["fields"]] == [
        "bob@example.com",
        "Lunch",
        "Lunch at 1?",
    ]
    assert mailbox.received == []
    waiting = {"configurable": {**config("mail_once")["configurable"]}}
    waiting["configurable"].update(agent.get_state(waiting).config["configurable"])

    out = agent.invoke(Command(resume=confirm(question.value["proposal_id"])), config("mail_once"))
    (receipt,) = receipts(out)
    assert receipt["status"] == "succeeded"
    (mail,) = mailbox.received
    assert mail["X-Request-Key"] == receipt["request_key"]
    assert mail["Message-ID"] == message_id(receipt["request_key"])
    assert mail["To"] == "bob@example.com"

    # A second confirm (LangChain's shape) and a replay of the first, from the old question.
    for answer in ({"decisions": [{"type": "approve"}]}, confirm(question.value["proposal_id"])):
        again = agent.invoke(Command(resume=answer), waiting)
        assert receipts(again)[-1]["execution_id"] == receipt["execution_id"]
    assert len(mailbox.received) == 1


def test_killed_after_the_question_then_confirmed_from_new_processes_sends_one_email(
    wg: Writegate, mailbox: Mailbox, log_path: str
) -> None:
    asking = child("start", "mail_kill", wg, mailbox, log_path)
    assert asking.stdout is not None
    question = json.loads(asking.stdout.readline())
    kill(asking)
    assert mailbox.received == []

    answer = json.dumps(confirm(question["proposal_id"]))
    first = report(child("resume", "mail_kill", wg, mailbox, log_path, answer))
    (receipt,) = first["results"]
    assert receipt["status"] == "succeeded" and first["pending"] == []
    assert len(mailbox.received) == 1

    # Another process answers the old question again, as a double click would.
    approve = json.dumps({"decisions": [{"type": "approve"}]})
    later = report(child("replay", "mail_kill", wg, mailbox, log_path, approve))
    assert later["results"][-1]["execution_id"] == receipt["execution_id"]
    assert len(mailbox.received) == 1
    assert mailbox.received[0]["X-Request-Key"] == receipt["request_key"]


def test_a_sender_killed_mid_delivery_is_never_sent_again(
    wg: Writegate, mailbox: HoldingMailbox, log_path: str
) -> None:
    _, question = ask(wg, "mail_mid")
    mailbox.release.clear()  # the server takes the mail and keeps the sender waiting
    answer = json.dumps(confirm(question.value["proposal_id"]))
    sender = child("resume", "mail_mid", wg, mailbox, log_path, answer)
    wait_until(lambda: mailbox.received, "the mail at the server")
    kill(sender)  # it never heard the 250: only the server knows the mail arrived
    mailbox.release.set()

    after = report(child("resume", "mail_mid", wg, mailbox, log_path, answer))
    told = after["results"][-1]
    assert told["code"] in ("in_progress", "outcome_unknown")
    with wg.runtime.pool.connection() as conn:
        wait_until(lambda: conn.execute(LEASE_EXPIRED_SQL).fetchone()["expired"], "lease expiry")
    # One check before a person decides (the default retries the lookup with backoff).
    settled = wg.reconciler(policy=ReconcilePolicy(max_checks=1)).drain()
    # The sent-log says "handed over, no answer": the lookup refuses to guess, so the
    # reconciler does not send it again; it goes to a person.
    assert [(s.status, s.action) for s in settled] == [("escalated", "escalated")]
    with wg.runtime.pool.connection() as conn:
        (row,) = conn.execute(ESCALATION_SQL).fetchall()
    assert row["escalation"]["last_error"] == "SendingUnsettled"
    assert len(mailbox.received) == 1


def test_a_server_that_stalls_past_the_deadline_gets_one_email(
    create_database: Callable[[], str], mailbox: HoldingMailbox, log_path: str
) -> None:
    tools = email_tools(mailbox.port, SentLog(log_path))
    with Writegate.open(create_database(), tools=tools, retry=ONE_SECOND) as wg:
        agent, question = ask(wg, "mail_slow")
        mailbox.release.clear()  # the server takes the mail, then holds back its 250
        answer = Command(resume=confirm(question.value["proposal_id"]))
        (told,) = receipts(agent.invoke(answer, config("mail_slow")))
        assert told["code"] == "outcome_unknown"  # at the deadline: not a success
        wait_until(lambda: mailbox.received, "the mail at the server")
        assert len(mailbox.received) == 1
        assert wg.reconciler().drain() == []  # the delivery may still be running
        mailbox.release.set()  # the 250 arrives late; the sender records it

        def status() -> str:
            with wg.runtime.pool.connection() as conn:
                (row,) = conn.execute(STATUS_SQL).fetchall()
            return str(row["status"])

        wait_until(lambda: status() == "succeeded", "the late 250 recorded")
        assert len(mailbox.received) == 1 and len(mailbox.delivered) == 1
