"""Asking the person through MCP elicitation, and binding the answer to one proposal.

The server asks, not the model: the elicitation shows the stored preview to the
person through the client. `accept` (with the box ticked) becomes a Confirm,
`decline` a Decline and `cancel` a Cancel; only then does the service issue a token.

Two eras of the protocol are served. On a handshake connection the server sends an
`elicitation/create` request on the tool call's own channel, so the answer belongs to
that call by construction. On a 2026 per-request connection servers may not send
requests; the tool returns an `InputRequiredResult` and the client retries the call
(with a new JSON-RPC id) carrying the answer and our `request_state`. That state is
signed and names the proposal, its argument digest, the session's thread and the
user, so an answer can only confirm the proposal it was asked for, in the session and
for the person it was asked of.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
from typing import Any

import mcp_types as types

from writegate.approval.decisions import Cancel, Confirm, Decline
from writegate.approval.errors import InvalidDecision
from writegate.approval.models import Identity, Proposal
from writegate.surfaces.confirm_text import confirm_lines, retype_ask

INPUT_KEY = "writegate_confirm"
STATE_KEY_ENV = "WRITEGATE_MCP_STATE_KEY"
CONFIRM_FIELD = "confirm"

RETYPE_FIELD = "retyped"


def confirm_schema(proposal: Proposal) -> dict[str, Any]:
    """A tick box, plus a text field when the proposal's tier asks to re-type a value."""
    properties: dict[str, Any] = {
        CONFIRM_FIELD: {
            "type": "boolean",
            "title": "Confirm",
            "description": "Tick to confirm exactly the operation shown above.",
        }
    }
    ask = retype_ask(proposal)
    if ask:
        properties[RETYPE_FIELD] = {
            "type": "string",
            "title": f"Re-type {ask['retype_field']}",
            "description": ask.get("retype_hint") or f"type the {ask['retype_field']}",
        }
    return {"type": "object", "properties": properties, "required": list(properties)}


def can_elicit(capabilities: types.ClientCapabilities | None) -> bool:
    """Form elicitation declared (an empty `elicitation: {}` means form, per the spec)."""
    if capabilities is None or capabilities.elicitation is None:
        return False
    cap = capabilities.elicitation
    return cap.form is not None or cap.url is None


def confirm_message(proposal: Proposal) -> str:
    return "\n".join(confirm_lines(proposal))


def elicit_request(proposal: Proposal) -> types.ElicitRequest:
    return types.ElicitRequest(
        params=types.ElicitRequestFormParams(
            message=confirm_message(proposal), requested_schema=confirm_schema(proposal)
        )
    )


def decision_of(result: types.ElicitResult, proposal: Proposal) -> Confirm | Decline | Cancel:
    """accept+ticked -> Confirm; decline, or accept with the box unticked -> Decline; cancel."""
    proposal_id = proposal.proposal_id
    if result.action == "accept":
        content = result.content or {}
        if content.get(CONFIRM_FIELD) is not True:
            return Decline(
                action="decline", proposal_id=proposal_id, reason="accepted without confirming"
            )
        if retype_ask(proposal):  # only then: `retyped` exists where tiers do
            retyped = content.get(RETYPE_FIELD)
            text = retyped if isinstance(retyped, str) else None
            return Confirm.model_validate(
                {"action": "confirm", "proposal_id": proposal_id, RETYPE_FIELD: text}
            )
        return Confirm(action="confirm", proposal_id=proposal_id)
    if result.action == "decline":
        return Decline(action="decline", proposal_id=proposal_id)
    return Cancel(action="cancel", proposal_id=proposal_id)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


class StateSigner:
    """HMAC over what an answer is bound to. Replicas share `WRITEGATE_MCP_STATE_KEY`."""

    def __init__(self, key: bytes | None = None) -> None:
        env = os.environ.get(STATE_KEY_ENV, "")
        self._key = key or (env.encode("utf-8") if env else secrets.token_bytes(32))

    @staticmethod
    def _claims(proposal: Proposal, thread_id: str, identity: Identity) -> bytes:
        claims = {
            "proposal_id": proposal.proposal_id,
            "args_digest": proposal.args_digest,
            "thread_id": thread_id,
            "user_id": identity.user_id,
            "tenant_id": identity.tenant_id,
        }
        return json.dumps(claims, sort_keys=True, separators=(",", ":")).encode("utf-8")

    def _mac(self, claims: bytes) -> str:
        return _b64(hmac.new(self._key, claims, hashlib.sha256).digest())

    def issue(self, proposal: Proposal, thread_id: str, identity: Identity) -> str:
        claims = self._claims(proposal, thread_id, identity)
        return f"{_b64(claims)}.{self._mac(claims)}"

    def check(
        self, state: str | None, proposal: Proposal, thread_id: str, identity: Identity
    ) -> None:
        """Refuse an answer that was not asked for this proposal, session and person."""
        expected = self._claims(proposal, thread_id, identity)
        _, _, mac = (state or "").partition(".")
        if not state or not hmac.compare_digest(state, f"{_b64(expected)}.{self._mac(expected)}"):
            raise InvalidDecision(
                "this confirmation answer was not asked for this proposal in this session; "
                "call the request tool again to be asked",
                proposal_id=proposal.proposal_id,
                signed=bool(mac),
            )
