"""`writegate threads` and `writegate orphans` page: `--cursor`, `--limit`, `--order`,
and the line after a page says how to ask for the next.

A thread pages on when it began, `(first checkpoint, thread_id)` (or its first
proposal, for a thread known only to the ledger), never on its last activity, which
moves: a walk both ways, while another connection starts threads and adds checkpoints
to the seeded ones, gets each seeded thread exactly once, in order, with the pending
approvals of the threads on its page. An orphan pages on `(created_at, proposal_id)`:
a walk gets each seeded orphan once, skipping the proposals it cannot judge, and a
walk with `--end` cancels each once and nothing else."""

from __future__ import annotations

import re
import secrets
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
import typer
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.postgres import PostgresSaver
from psycopg.rows import dict_row
from typer.testing import CliRunner

from writegate.checkpoints.schema import setup_database
from writegate.graph import orphans as graph_orphans
from writegate.surfaces.cli import threads as cli_threads
from writegate.surfaces.store import setup_service

THREADS = 300  # checkpointed, five beginning at each second
LEDGER_ONLY = 20  # threads with a pending proposal and no checkpoint
PAGE = 40
BASE = datetime(2026, 1, 1, tzinfo=UTC)

# Two checkpoints each: the first at `at`, the second an hour later (the last activity).
CHECKPOINTS_SQL = """
INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, checkpoint, metadata)
SELECT thread_id, '', %(prefix)s || k || '_' || thread_id,
       jsonb_build_object('v', 1, 'id', %(prefix)s || k,
                          'ts', to_jsonb(at + k * interval '1 hour')),
       jsonb_build_object('user_id', 'alice', 'tenant_id', %(tenant)s::text)
FROM unnest(%(threads)s::text[], %(ats)s::timestamptz[]) AS seed(thread_id, at),
     generate_series(0, %(checkpoints)s - 1) AS k"""
PROPOSALS_SQL = """
INSERT INTO writegate.proposals (proposal_id, thread_id, tool_call_id, subject, tenant_id,
    operation, resource, args, args_digest, fingerprint, state_version, preview,
    policy_version, request_key, status, created_at, expires_at)
SELECT proposal_id, thread_id, 'call_' || proposal_id, 'alice', %(tenant)s, 'pay',
    'account:a', '{}', 'sha256:x', 'fp_' || proposal_id, 0, '{"title": "Pay"}', 'p1',
    'rk_' || proposal_id, 'awaiting_confirmation', at, now() + interval '1 day'
FROM unnest(%(proposals)s::text[], %(threads)s::text[], %(ats)s::timestamptz[])
    AS seed(proposal_id, thread_id, at)"""


def cli(url: str, *args: str) -> typer.testing.Result:
    app = typer.Typer()
    cli_threads.register(app)
    return CliRunner().invoke(app, list(args), env={"DATABASE_URL": url})


def checkpoint(
    url: str, tenant: str, threads: list[str], ats: list[datetime], n: int, prefix: str = "ck_"
) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        params = {"tenant": tenant, "threads": threads, "ats": ats, "checkpoints": n}
        params["prefix"] = prefix
        conn.execute(CHECKPOINTS_SQL, params)


def propose(url: str, tenant: str, rows: list[tuple[str, str, datetime]]) -> None:
    proposals, threads, ats = (list(column) for column in zip(*rows, strict=True))
    with psycopg.connect(url, autocommit=True) as conn:
        params = {"tenant": tenant, "proposals": proposals, "threads": threads, "ats": ats}
        conn.execute(PROPOSALS_SQL, params)


@pytest.fixture(scope="module")
def seeded(url: str) -> dict[str, Any]:
    """The tenant, its threads in the order they began, and the pending proposals."""
    tenant = f"tenant_{secrets.token_hex(4)}"
    began = {f"th_c{n:05}": BASE + timedelta(seconds=n // 5) for n in range(THREADS)}
    checkpoint(url, tenant, list(began), list(began.values()), 2)
    # Ledger-only threads begin at their first proposal, between the checkpointed ones;
    # every tenth checkpointed thread has a pending proposal too, after it began.
    ledger = {f"th_l{n:05}": BASE + timedelta(seconds=3 * n) for n in range(LEDGER_ONLY)}
    asked = [(f"pr_l{n:05}", thread, at) for n, (thread, at) in enumerate(ledger.items())]
    asked += [(f"pr_c{n:05}", thread, at + timedelta(minutes=1))
              for n, (thread, at) in enumerate(began.items()) if n % 10 == 0]  # fmt: skip
    propose(url, tenant, asked)
    began.update(ledger)
    order = sorted(began, key=lambda thread: (began[thread], thread))
    return {"tenant": tenant, "threads": order, "pending": {p: t for p, t, _ in asked}}


def shown_threads(stdout: str) -> tuple[list[str], list[tuple[str, str]]]:
    """The threads a page lists, and its pending approvals as (proposal, thread)."""
    listed, _, waiting = stdout.partition("pending approvals")
    rows = [line for line in waiting.splitlines() if "pr_" in line]
    pairs = [(re.findall(r"\bpr_\w+", r)[0], re.findall(r"\bth_\w+", r)[0]) for r in rows]
    return re.findall(r"\bth_\w+", listed), pairs


def next_cursor(stdout: str) -> list[str]:
    hint = [line for line in stdout.splitlines() if line.startswith("next page: --cursor ")]
    if not hint:
        assert "last page" in stdout
        return []
    return ["--cursor", hint[0].removeprefix("next page: --cursor ").strip()]


@pytest.mark.parametrize("order", ["oldest", "newest"])
def test_threads_page_once_each_on_when_they_began_while_threads_move_and_start(
    url: str, seeded: dict[str, Any], order: str
) -> None:
    tenant, seeded_threads = seeded["tenant"], seeded["threads"]
    got: list[str] = []
    pending: list[tuple[str, str]] = []
    cursor: list[str] = []
    pages = 0
    while True:
        shown = cli(url, "threads", "--tenant", tenant, "--order", order, "--limit", str(PAGE),
                    *cursor)  # fmt: skip
        assert shown.exit_code == 0, shown.output
        listed, waiting = shown_threads(shown.stdout)
        assert len(listed) <= PAGE
        assert {thread for _, thread in waiting} <= set(listed)  # the page's threads' only
        got += listed
        pending += waiting
        pages += 1
        # Meanwhile: three threads begin, and three seeded ones move (a checkpoint now).
        now = datetime.now(UTC)
        fresh = [f"th_n{secrets.token_hex(4)}" for _ in range(3)]
        checkpoint(url, tenant, fresh, [now] * 3, 1)
        moved = [seeded_threads[(pages * 37 + i) % len(seeded_threads)] for i in range(3)]
        checkpoint(url, tenant, moved, [now] * 3, 1, prefix=f"moved_{pages}_{order}_")
        if not (cursor := next_cursor(shown.stdout)):
            break
    assert pages > len(seeded_threads) // PAGE
    assert not {thread for thread, n in Counter(got).items() if n > 1}
    wanted = seeded_threads if order == "oldest" else seeded_threads[::-1]
    assert [thread for thread in got if thread in set(wanted)] == wanted
    assert sorted(pending) == sorted(seeded["pending"].items())


def test_threads_show_last_activity_not_when_they_began(url: str, seeded: dict[str, Any]) -> None:
    shown = cli(url, "threads", "--tenant", seeded["tenant"], "--order", "oldest", "--limit", "1")
    assert shown.exit_code == 0, shown.output
    first = seeded["threads"][0]
    row = next(line for line in shown.stdout.splitlines() if first in line)
    assert "2026-01-01 01:00:00" in row  # its second checkpoint, an hour after it began


@pytest.mark.parametrize("command", ["threads", "orphans"])
@pytest.mark.parametrize(
    "args", [["--cursor", "e30"], ["--cursor", "not a cursor"], ["--order", "sideways"]]
)
def test_a_cursor_not_given_by_the_list_is_refused(url: str, command: str, args: list[str]) -> None:
    refused = cli(url, command, *args)
    assert refused.exit_code == 1 and "validation_failed" in refused.output
    assert "Traceback" not in refused.output


def test_a_cursor_of_the_other_list_is_refused(url: str, seeded: dict[str, Any]) -> None:
    shown = cli(url, "threads", "--tenant", seeded["tenant"], "--limit", "1")
    cursor = next_cursor(shown.stdout)
    assert cursor
    refused = cli(url, "orphans", *cursor)
    assert refused.exit_code == 1 and "validation_failed" in refused.output
    refused = cli(url, "threads", "--order", "oldest", *cursor)  # given for newest first
    assert refused.exit_code == 1 and "validation_failed" in refused.output


ORPHANS = 90
UNJUDGED = 60  # pending on threads with no checkpoint here: never orphans


@pytest.fixture
def orphaned(create_database: Callable[[], str], monkeypatch: pytest.MonkeyPatch) -> str:
    """A database of its own: ORPHANS proposals on threads the real checkpointer holds
    but whose head asks nothing, interleaved with UNJUDGED it cannot judge; the page
    fills from pending proposals read a few at a time."""
    url = create_database()
    setup_database(url)
    setup_service(url)
    monkeypatch.setattr(graph_orphans, "PENDING_CHUNK", 7)
    tenant = "tenant_o"
    with PostgresSaver.from_conn_string(url) as saver:
        for n in range(ORPHANS):
            config = {"configurable": {"thread_id": f"th_o{n:05}", "checkpoint_ns": ""}}
            saver.put(config, empty_checkpoint(), {"tenant_id": tenant}, {})  # type: ignore[arg-type]
    old = BASE - timedelta(days=1)
    rows = [(f"pr_o{n:05}", f"th_o{n:05}", old + timedelta(seconds=n // 3)) for n in range(ORPHANS)]
    rows += [(f"pr_u{n:05}", f"th_u{n:05}", old + timedelta(seconds=n // 2))
             for n in range(UNJUDGED)]  # fmt: skip
    propose(url, tenant, rows)
    return url


def orphan_ids(stdout: str) -> list[str]:
    return re.findall(r"\bpr_\w+", stdout)


def walk_orphans(url: str, *args: str) -> list[str]:
    """Every page of `writegate orphans`; between pages, another connection proposes
    three more on a seeded orphan's thread (new orphans, younger than the seeded)."""
    got: list[str] = []
    cursor: list[str] = []
    while True:
        shown = cli(url, "orphans", "--older-than", "0", "--limit", "13", *args, *cursor)
        assert shown.exit_code == 0, shown.output
        page = orphan_ids(shown.stdout)
        assert len(page) <= 13
        got += page
        now = datetime.now(UTC) - timedelta(seconds=1)
        propose(url, "tenant_o", [(f"pr_n{secrets.token_hex(4)}", "th_o00000", now)])
        if not (cursor := next_cursor(shown.stdout)):
            return got


@pytest.mark.parametrize("order", ["oldest", "newest"])
def test_orphans_page_once_each_and_skip_what_cannot_be_judged(orphaned: str, order: str) -> None:
    got = walk_orphans(orphaned, "--order", order)
    assert not {p for p, n in Counter(got).items() if n > 1}
    wanted = [f"pr_o{n:05}" for n in range(ORPHANS)]
    wanted = wanted if order == "oldest" else wanted[::-1]
    assert [p for p in got if p.startswith("pr_o")] == wanted
    assert not [p for p in got if p.startswith("pr_u")]


def test_orphans_end_cancels_each_page_once_and_nothing_else(orphaned: str) -> None:
    got = walk_orphans(orphaned, "--end", "--by", "operator:test")
    assert not {p for p, n in Counter(got).items() if n > 1}
    assert sorted(p for p in got if p.startswith("pr_o")) == [f"pr_o{n:05}" for n in range(ORPHANS)]
    with psycopg.connect(orphaned, row_factory=dict_row) as conn:
        statuses = conn.execute(
            "SELECT left(proposal_id, 4) AS kind, status, count(*) AS n "
            "FROM writegate.proposals WHERE proposal_id = ANY(%s) GROUP BY 1, 2",
            (got + [f"pr_u{n:05}" for n in range(UNJUDGED)],),
        ).fetchall()
    assert {(r["kind"], r["status"]): r["n"] for r in statuses} == {
        ("pr_o", "cancelled"): ORPHANS,
        ("pr_n", "cancelled"): len(got) - ORPHANS,
        ("pr_u", "awaiting_confirmation"): UNJUDGED,
    }
