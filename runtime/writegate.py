"""`Writegate`: writegate as a library, in front of your own tools.

    with Writegate.open(tools=[refund, get_order]) as wg:
        builder.add_node("tools", wg.tool_node())        # your own StateGraph
        graph = builder.compile(checkpointer=wg.checkpointer)
        agent = wg.build_agent(model)                     # or writegate's whole agent
        create_agent(model, tools, middleware=[wg.middleware()], checkpointer=wg.checkpointer)

It opens the database (DATABASE_URL, a local server, or the embedded default), sets
up its tables, and wires the protocol over the tools given; ledgers and LangGraph's
checkpoints share one pool and one database.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, TypedDict, Unpack, cast

from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.graph.state import CompiledStateGraph
from psycopg import AsyncConnection
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from writegate.approval.downstream import RetryPolicy
from writegate.approval.ended import THREAD_DELETED, THREAD_ENDED, end_thread
from writegate.approval.errors import MissingIdentity
from writegate.approval.models import Identity
from writegate.approval.reconcile import Reconciler, ReconcilerOptions
from writegate.approval.service import Policy
from writegate.approval.spec import ToolSpec
from writegate.approval.views import (
    AuditRow,
    Order,
    Page,
    PageArgs,
    ProposalView,
    audit_page,
)
from writegate.checkpoints.database import check_database, resolve_database_url
from writegate.checkpoints.namespace import DEFAULT_SCHEMA
from writegate.checkpoints.ops import PgBacklog
from writegate.checkpoints.pool import Pool
from writegate.graph.build import build_graph
from writegate.graph.identity import ServerUserFields, identity_of, thread_of
from writegate.graph.nodes import LIBRARY_PROMPT
from writegate.graph.orphans import ORPHAN_GRACE, orphaned
from writegate.graph.tool_node import build_before_model, build_tool_node
from writegate.runtime.wiring import Runtime
from writegate.tools.kit import GuardedTool
from writegate.tools.registry import Registry

if TYPE_CHECKING:  # LangChain is an optional extra: imported when middleware() is called
    from writegate.graph.middleware import WritegateMiddleware


def spec_of(tool: Any) -> ToolSpec:
    """The protocol's view of one tool given to `Writegate.open`."""
    if isinstance(tool, GuardedTool):
        spec: ToolSpec = tool.spec
        return spec
    if isinstance(tool, BaseTool):
        raise TypeError(
            f"{tool.name}: wrap it with write_tool(tool, side_effect=...) or read_tool(tool) "
            "so writegate knows whether it changes anything"
        )
    if callable(getattr(tool, "normalize", None)) and hasattr(tool, "requires_approval"):
        return tool  # already a ToolSpec (the conformance kit's recorder, a test double)
    raise TypeError(f"not a tool: {tool!r}; decorate it with @write_tool or @read_tool")


class OpenOptions(TypedDict, total=False):
    """`Writegate.open`'s further keyword arguments, each optional."""

    server_user: ServerUserFields
    """Where the identity is read in LangGraph Server's authenticated user."""
    max_connections: int
    """The size of writegate's connection pool (default 10)."""
    setup: bool
    """False: the tables are not set up here (`writegate db setup` did it); default True."""
    pool: Pool
    """A pool already open on the database, used instead of opening one."""
    clock: Callable[[], datetime]
    """The ledger's clock instead of the database's (tests)."""
    step_hook: Callable[[str], None]
    """Called at each step of an execution ("claimed", "downstream_returned", ...):
    the fault-injection tests stop a process there."""


class Writegate:
    """One database, the protocol's services over your tools, and the graph pieces."""

    def __init__(self, runtime: Runtime, tools: list[Any]) -> None:
        self.runtime = runtime
        self.tools = tools

    @classmethod
    def open(
        cls,
        database_url: str | None = None,
        *,
        tools: Iterable[Any],
        policy: Policy | None = None,
        schema: str = DEFAULT_SCHEMA,
        retry: RetryPolicy | None = None,
        **options: Unpack[OpenOptions],
    ) -> Writegate:
        """Open `database_url` (None: `DATABASE_URL`, a local server, or the embedded
        default) for `tools`; a database named there that does not exist is refused
        (`DatabaseUnavailable`), never created. Writegate's own tables are set up, in the schema
        `schema` and nowhere else, with LangGraph's checkpoint tables. `retry`: the
        deadline and retries of every write tool that sets none of its own
        (`write_tool(retry=...)`). `options` (`OpenOptions`): `server_user`,
        `max_connections`, `setup`, `pool`, `clock`, `step_hook`."""
        given = list(tools)
        registry = Registry(spec_of(tool) for tool in given)
        url = database_url or resolve_database_url()
        check_database(url)  # a database named but missing is refused, never created
        runtime = Runtime.open(
            url, tools=registry, policy=policy, schema=schema, retry=retry, **options
        )
        identify = partial(identity_of, fields=runtime.server_user)
        for tool in given:
            if isinstance(tool, GuardedTool):
                tool.attach(runtime.service, identify, thread_of)
        return cls(runtime, given)

    # -- checkpoints ------------------------------------------------------------------

    @property
    def checkpointer(self) -> PostgresSaver:
        """LangGraph's Postgres saver on writegate's pool (its tables are set up)."""
        return self.runtime.checkpointer

    @asynccontextmanager
    async def async_checkpointer(self, max_size: int = 10) -> AsyncIterator[AsyncPostgresSaver]:
        """An `AsyncPostgresSaver` on the same database, for `ainvoke` / `astream`."""
        pool: AsyncConnectionPool[AsyncConnection[DictRow]] = AsyncConnectionPool(
            self.runtime.url,
            kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
            max_size=max_size,
            open=False,
        )
        await pool.open(wait=True)
        try:
            yield AsyncPostgresSaver(pool)
        finally:
            await pool.close()

    # -- graph pieces -----------------------------------------------------------------

    def tool_node(self, name: str = "tools") -> CompiledStateGraph[Any, Any, Any, Any]:
        """A drop-in for `ToolNode` in your StateGraph: reads run, writes ask first."""
        return build_tool_node(self.runtime, name)

    def before_model(self) -> Callable[[dict[str, Any], RunnableConfig], Any]:
        """A node for your StateGraph, from START to your model: it answers the tool
        calls a new message left waiting (their questions are cancelled), so the model
        gets a history every provider accepts, and reports writes reconciled since.
        `create_agent` with `middleware()` and `build_agent` do this themselves."""
        return build_before_model(self.runtime)

    def build_agent(
        self,
        model: Runnable[Any, Any],
        *,
        checkpointer: BaseCheckpointSaver[Any] | None = None,
        system_prompt: str = LIBRARY_PROMPT,
        bind_tools: bool = True,
    ) -> CompiledStateGraph[Any, Any, Any, Any]:
        """writegate's whole agent graph over your tools, with `model` bound to them.

        `checkpointer` defaults to `self.checkpointer`; pass the one from
        `async_checkpointer()` to run it with `ainvoke` / `astream`. `bind_tools=False`:
        `model` comes bound to the tools already, with options of its own
        (`openai_chat_model(specs)` binds them strictly), and is used as it is.
        """
        bind = getattr(model, "bind_tools", None) if bind_tools else None
        bound = bind(self.runtime.registry.openai_tools()) if callable(bind) else model
        return build_graph(
            self.runtime,
            model=bound,
            checkpointer=checkpointer or self.checkpointer,
            system_prompt=system_prompt,
        )

    def middleware(self) -> WritegateMiddleware:
        """A LangChain v1 `AgentMiddleware` for `langchain.agents.create_agent`: writes
        behind the gate, reads audited. Needs the `[langchain]` extra."""
        try:
            from writegate.graph.middleware import WritegateMiddleware
        except ImportError as exc:
            if not (exc.name or "").startswith("langchain"):
                raise
            raise ImportError(
                "wg.middleware() needs LangChain v1: install writegate[langchain] "
                "(or langchain>=1.0)",
                name=exc.name,
            ) from exc
        return WritegateMiddleware(self.runtime)

    def reconciler(self, **options: Unpack[ReconcilerOptions]) -> Reconciler:
        """Settles the unknown outcomes of these tools (only these: another application's
        tools in the same database are left to it) with their lookups; call `.drain()`
        or `.run_once()` on a schedule. `options` (`ReconcilerOptions`): `policy`,
        `retry` (default: the one given to `open`), `owner`, `step_hook`, `sleep`."""
        options.setdefault("retry", self.runtime.executor.retry)
        return Reconciler(self.runtime.service, PgBacklog(self.runtime.pool), **options)

    @property
    def policy(self) -> Policy:
        """The approval policy in force: its version, tiers and points."""
        return self.runtime.service.policy

    # -- the audit trail --------------------------------------------------------------

    def audit(
        self,
        tenant_id: str,
        *,
        thread_id: str | None = None,
        proposal_id: str | None = None,
        limit: int = 500,
        cursor: str | None = None,
        order: Order = "oldest",
        tool_name: str | None = None,
        status: str | None = None,
    ) -> Page[AuditRow]:
        """The audit rows of one tenant (required: never another's), `order` "oldest"
        (the default) or "newest" first, at most `limit`; only a thread's, a proposal's,
        a tool's or a status's when one is given. A list, with `next_cursor`: pass it
        back as `cursor` (same order) for the next page; None on the last."""
        args = PageArgs(limit, cursor, order, thread_id, proposal_id, tool_name, status)
        page = audit_page(self.runtime.store.audit_rows, tenant_id, args)
        return Page(map(AuditRow.of, page), page.next_cursor)

    # -- a second approver, and revocation ----------------------------------------------
    # `identity` is the acting person, from your application's signed-in session. Every
    # refusal is a `WritegateError` (`forbidden`, `not_found`, `self_approval`,
    # `proposal_not_pending`, `proposal_expired`, `revoke_too_late`, ...), and audited.

    def awaiting_second_approval(
        self,
        identity: Identity,
        *,
        limit: int = 100,
        cursor: str | None = None,
        order: Order = "oldest",
        thread_id: str | None = None,
        proposal_id: str | None = None,
        tool_name: str | None = None,
    ) -> Page[ProposalView]:
        """What this approver may approve: their tenant's proposals whose requester
        confirmed them and that wait for a second approver, never their own; `order`
        first (by when each was proposed), at most `limit`, filtered as given. A list,
        with `next_cursor` for the next page (None on the last), as `audit`'s."""
        args = PageArgs(limit, cursor, order, thread_id, proposal_id, tool_name)
        page = self.runtime.service.awaiting_second_approval(_acting(identity), args)
        return Page(map(ProposalView.of, page), page.next_cursor)

    def approve_as_second(self, identity: Identity, proposal_id: str) -> ProposalView:
        """Approve as a different user of the same tenant with the `approver` role: the
        last approval runs the write, here and once, for its requester. The view's
        `outcome` is its receipt, or why it did not run or is not settled yet; the
        requester's thread gets the same receipt when it next runs (`resume_requester`)."""
        approved = self.runtime.executor.approve_as_second(_acting(identity), proposal_id)
        return ProposalView.of(approved.proposal, approved.outcome_body())

    def decline_as_second(self, identity: Identity, proposal_id: str) -> ProposalView:
        """Decline as the second approver: the proposal ends declined, and nothing runs."""
        declined = self.runtime.service.decline_as_second(_acting(identity), proposal_id)
        return ProposalView.of(declined)

    def revoke(self, identity: Identity, proposal_id: str) -> ProposalView:
        """Stop an approval that has not executed (an approver or admin of the tenant, or
        the requester); once it started executing, `revoke_too_late`."""
        return ProposalView.of(self.runtime.service.revoke(_acting(identity), proposal_id))

    # -- threads that ended without writegate ------------------------------------------

    def end_thread(self, identity: Identity, thread_id: str, *, deleted: bool = False) -> list[str]:
        """The thread was deleted, or ended (a state update to `__end__`) where writegate
        did not run: cancel `identity`'s open proposals on it, each audited as ended by
        them. Call it from the hook that learns it (a LangGraph Server auth handler's
        thread delete, see examples/server_auth.py). The ids cancelled."""
        why = THREAD_DELETED if deleted else THREAD_ENDED
        return end_thread(self.runtime.service, _acting(identity), thread_id, why)

    def orphaned(
        self,
        older_than: timedelta = ORPHAN_GRACE,
        tenant_id: str | None = None,
        page: PageArgs | None = None,
    ) -> Page[ProposalView]:
        """Open proposals whose thread, checkpointed in this database, no longer asks
        them (ended elsewhere; see graph/orphans.py), older than `older_than`, of
        `tenant_id` or of every tenant: every one (oldest first), or the page `page`
        asks for (its `next_cursor` continues the walk; docs/paging.md)."""
        found = orphaned(self.runtime, self.checkpointer, older_than, tenant_id, page)
        return Page([ProposalView.of(proposal) for proposal in found], found.next_cursor)

    def end_orphaned(
        self,
        operator: str,
        older_than: timedelta = ORPHAN_GRACE,
        tenant_id: str | None = None,
        page: PageArgs | None = None,
    ) -> Page[ProposalView]:
        """Cancel what `orphaned` lists (every one, or that page's), each audited as
        ended by `operator` (in the proposal's tenant), `thread_ended`. What was
        cancelled, with the listing's `next_cursor`."""
        found = orphaned(self.runtime, self.checkpointer, older_than, tenant_id, page)
        ended: list[ProposalView] = []
        for proposal in found:
            who = Identity(user_id=operator, tenant_id=proposal.tenant_id)
            cancelled = end_thread(
                self.runtime.service,
                who,
                proposal.thread_id,
                THREAD_ENDED,
                any_owner=True,
                only=proposal.proposal_id,
            )
            if cancelled:
                ended.append(ProposalView.of(proposal))
        return Page(ended, found.next_cursor)

    # -- lifetime ---------------------------------------------------------------------

    def close(self) -> None:
        self.runtime.close()

    def __enter__(self) -> Writegate:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def server_agent(
    open_writegate: Callable[[], Writegate],
    model: Runnable[Any, Any],
    *,
    system_prompt: str = LIBRARY_PROMPT,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """writegate's whole agent for LangGraph Server: the module-level `graph` your
    `langgraph.json` names. It is compiled without a checkpointer (the server brings its
    own) over the `Writegate` that `open_writegate()` returns, called once, on the first
    run that needs it: importing the module connects to nothing, so the server starts and
    serves the graph's schemas while the database is still coming up. `model` comes
    bound to the tools already (`model.bind_tools(tools)`), since no database is open to
    read them from."""
    runtime = cast(Runtime, _OpenedOnFirstUse(open_writegate))
    return build_graph(runtime, model=model, checkpointer=None, system_prompt=system_prompt)


class _OpenedOnFirstUse:
    """Stands in for a `Runtime` and opens the real one on first attribute access."""

    def __init__(self, open_writegate: Callable[[], Writegate]) -> None:
        self._open = open_writegate
        self._runtime: Runtime | None = None
        # Server runs execute sync nodes on worker threads: open exactly once.
        self._lock = threading.Lock()

    def _get(self) -> Runtime:
        if self._runtime is None:
            with self._lock:
                if self._runtime is None:
                    self._runtime = self._open().runtime
        return self._runtime

    def __getattr__(self, name: str) -> Any:
        # Only reached for names not found on this object: the runtime's fields.
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._get(), name)


def _acting(identity: Identity) -> Identity:
    """The person acting, as your application authenticated them."""
    if not isinstance(identity, Identity):
        raise TypeError(f"pass an Identity from your signed-in session, not {identity!r}")
    if not identity.user_id or not identity.tenant_id:
        raise MissingIdentity()
    return identity
