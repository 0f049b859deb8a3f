"""writegate as an MCP server: the same propose / confirm / execute protocol for any client.

Built on the official `mcp` SDK's low-level `Server`, over the same registry, ledgers
and database as the graph (`runtime.wiring.Runtime`). Tools (see `surfaces/mcp_server/tools.py`):
read tools as they are; each write tool as `request_<tool>_confirmation` (propose and
ask the person through elicitation) and `execute_confirmed_<tool>` (consume the
one-time token, run at most once, return the receipt).

Identity comes from the session, never from arguments: the configured user over stdio,
the bearer key's user over HTTP. The thread of every proposal is
`mcp:<tenant>:<user>:<session>`, where the session is this process's connection (stdio)
or the `Mcp-Session-Id` the HTTP transport assigned (`stateless` without one).

Every failure is a tool result with `isError: true` and structured content
`{code, message, retryable, request_id}`; stack traces stay in the server log.
"""

from __future__ import annotations

import json
import logging
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from writegate.approval.errors import ValidationFailed, WritegateError
from writegate.approval.models import Identity, Proposal
from writegate.approval.service import new_id
from writegate.approval.spec import ToolSpec
from writegate.approval.wire import dumps, error_content
from writegate.runtime.wiring import Runtime
from writegate.surfaces.mcp_server.calls import Calls
from writegate.surfaces.mcp_server.confirm import (
    INPUT_KEY,
    StateSigner,
    can_elicit,
    decision_of,
    elicit_request,
)
from writegate.surfaces.mcp_server.identity import (
    ASGIApp,
    KeyRing,
    request_identity,
    require_bearer,
)
from writegate.surfaces.mcp_server.tools import mcp_tool, routes

log = logging.getLogger("writegate.mcp")

INSTRUCTIONS = (
    "writegate tools. Read tools run directly. A write is two steps: "
    "request_<tool>_confirmation creates a proposal and asks the person to confirm the "
    "exact preview (it never executes); execute_confirmed_<tool> then runs it once with "
    "the proposal_id and the one-time confirmation_token. Errors carry a code; "
    "'declined' and 'cancelled' are the person's answer: do not retry them."
)


def _version() -> str:
    try:
        return version("writegate")
    except PackageNotFoundError:  # running from a source tree without installing
        return "0"


def _tool_result(body: dict[str, Any], *, error: bool = False) -> types.CallToolResult:
    plain = json.loads(json.dumps(body, ensure_ascii=False, default=str))
    text = dumps(plain)  # a client may print it: escapes shown, not obeyed
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=plain,
        is_error=error,
    )


class WritegateMCP:
    """One MCP server over one runtime. `identity` serves stdio; `keys` serves HTTP."""

    def __init__(
        self,
        runtime: Runtime,
        *,
        identity: Identity | None = None,
        keys: KeyRing | None = None,
        signer: StateSigner | None = None,
    ) -> None:
        self.runtime = runtime
        self.identity = identity
        self.keys = keys
        self.calls = Calls(runtime)
        self.signer = signer or StateSigner()
        self.routes = routes(runtime.registry)
        self.tools = [mcp_tool(name, route) for name, route in self.routes.items()]
        # Over stdio one process serves exactly one client connection.
        self.connection_id = new_id("conn")
        self.server: Server[Any] = Server(
            "writegate",
            version=_version(),
            instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )

    # -- who is calling ---------------------------------------------------------------

    def who(self, ctx: ServerRequestContext[Any, Any]) -> tuple[Identity, str]:
        request = ctx.request
        headers = getattr(request, "headers", None)
        if request is None or headers is None:  # stdio: configured identity, this connection
            if self.identity is None:
                raise ValidationFailed("this server has no configured identity")
            identity, session = self.identity, self.connection_id
        else:
            if self.keys is None:
                raise ValidationFailed("this server accepts no HTTP callers")
            identity = request_identity(request.scope)  # the key looked up for this request
            session = headers.get("mcp-session-id") or "stateless"
        return identity, f"mcp:{identity.tenant_id}:{identity.user_id}:{session}"

    # -- handlers ---------------------------------------------------------------------

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self.tools)

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        try:
            route = self.routes.get(params.name)
            if route is None:
                raise ValidationFailed(f"unknown tool {params.name!r}")
            identity, thread = self.who(ctx)
            args = params.arguments or {}
            if route.kind == "read":
                body = await anyio.to_thread.run_sync(
                    self.calls.read, identity, thread, route.spec.name, args
                )
                return _tool_result(body if isinstance(body, dict) else {"result": body})
            if route.kind == "execute":
                body = await anyio.to_thread.run_sync(
                    self.calls.execute, identity, thread, route.spec, args
                )
                return _tool_result(body)
            return await self._request(ctx, params, identity, thread, route.spec, args)
        except WritegateError as exc:
            body = error_content(exc)
            log.info("tool %s refused: %s (%s)", params.name, exc.code, body["request_id"])
            return _tool_result(body, error=True)
        except Exception:
            body = error_content(WritegateError())
            log.exception("tool %s failed (%s)", params.name, body["request_id"])
            return _tool_result(body, error=True)

    async def _request(
        self,
        ctx: ServerRequestContext[Any, Any],
        params: types.CallToolRequestParams,
        identity: Identity,
        thread: str,
        spec: ToolSpec,
        args: dict[str, Any],
    ) -> types.CallToolResult | types.InputRequiredResult:
        proposal, final = await anyio.to_thread.run_sync(
            self.calls.propose, identity, thread, spec, args
        )
        if final is not None:
            return _tool_result(final)
        answer = await self._ask(ctx, params, identity, thread, proposal)
        if isinstance(answer, types.InputRequiredResult):
            return answer
        if answer is None:  # no way to ask here: the person confirms on the CLI
            return _tool_result(self.calls.awaiting(identity, proposal))
        decision = decision_of(answer, proposal)
        body = await anyio.to_thread.run_sync(self.calls.decide, identity, decision)
        return _tool_result(body)

    async def _ask(
        self,
        ctx: ServerRequestContext[Any, Any],
        params: types.CallToolRequestParams,
        identity: Identity,
        thread: str,
        proposal: Proposal,
    ) -> types.ElicitResult | types.InputRequiredResult | None:
        session = ctx.session
        if not can_elicit(session.client_capabilities):
            return None
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            # No server-to-client requests: ask in the result; the retry brings the answer.
            answer = (params.input_responses or {}).get(INPUT_KEY)
            if answer is None:
                return types.InputRequiredResult(
                    input_requests={INPUT_KEY: elicit_request(proposal)},
                    request_state=self.signer.issue(proposal, thread, identity),
                )
            self.signer.check(params.request_state, proposal, thread, identity)
            if not isinstance(answer, types.ElicitResult):
                raise ValidationFailed("the confirmation answer must be an elicitation result")
            return answer
        if not session.can_send_request:
            return None
        ask = elicit_request(proposal).params
        assert isinstance(ask, types.ElicitRequestFormParams)
        try:
            return await session.elicit_form(
                ask.message, ask.requested_schema, related_request_id=ctx.request_id
            )
        except MCPError as exc:  # the client refused to elicit after all
            log.info("elicitation refused by the client: %s", exc)
            return None

    # -- transports -------------------------------------------------------------------

    async def serve_stdio(self) -> None:
        async with stdio_server() as (read_stream, write_stream):
            await self.server.run(
                read_stream, write_stream, self.server.create_initialization_options()
            )

    def http_app(self, host: str = "127.0.0.1") -> ASGIApp:
        if self.keys is None or not len(self.keys):
            raise ValidationFailed("HTTP needs bearer keys (WRITEGATE_MCP_KEYS)")
        app = self.server.streamable_http_app(host=host)
        return require_bearer(app, self.keys)
