"""The contract with whoever shows a question and sends its answer: typed.

A write's question reaches a client as the value of a LangGraph interrupt
(`ApprovalRequest`): the proposal, its exact preview, its expiry, the answers it takes,
and LangChain's `action_requests` / `review_configs`, so that Agent Chat UI and LangGraph
Studio render it as they render LangChain's own human-in-the-loop requests. The answer,
passed as `Command(resume=...)`, is writegate's event (`Confirm`, `Decline`, `Cancel`,
`Edit` in approval/decisions.py), LangChain's `{"decisions": [...]}` shape
(`HitlDecisions`), or Agent Inbox's `HumanResponse` list (approval/inbox.py). Every
key here is stable: clients rely on it.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict


class PreviewFieldView(TypedDict):
    """One line of a preview."""

    name: str
    """The argument it shows."""
    value: Any
    """The machine value that runs: exactly the confirmed argument."""
    display: str
    """What a person reads (e.g. "¥199.00" for 19900); for eyes only, never executed."""
    label: NotRequired[str]
    """The word a person reads for the field ("Amount"), when the tool gives one."""
    options: NotRequired[list[str]]
    """A closed set of values: an edit form offers these only."""
    identifies: NotRequired[bool]
    """True when the field names the target: changing it would be another operation."""
    money_of: NotRequired[str]
    """For an amount in minor units: the name of the field holding its currency."""


class PreviewView(TypedDict):
    """What the person sees before deciding: the exact operation, in their words."""

    title: str
    """One line saying what happens ("Refund order ord_1001")."""
    operation: str
    """The tool that runs."""
    target: str
    """The resource acted on (e.g. "order:ord_1001")."""
    fields: list[PreviewFieldView]
    """Every argument that runs, in the tool's own order."""
    impact: str
    """What changes, and for whom, in words."""
    side_effect: Literal["reversible", "irreversible", "external"]
    """How the write acts on the world."""
    irreversible: bool
    """True unless the side effect can be undone."""
    external: bool
    """True when it leaves the system (money, a message, another company's records)."""
    confirmation: NotRequired[dict[str, Any]]
    """What the proposal's risk tier asks of the person (a second approver, a field to
    type again) and why: its score and the reasons counted."""


class ErrorBody(TypedDict):
    """Every refusal, to the model, a person or a client: never a stack trace."""

    code: str
    """Stable code, e.g. `validation_failed`, `declined`, `outcome_unknown`."""
    message: str
    """What happened, and what to do next."""
    retryable: bool
    """Whether the same request may succeed later (the system retries with its own key)."""
    request_id: str
    """An id to find this refusal in the logs."""
    details: NotRequired[dict[str, Any]]
    """Structured facts about it (ids, versions, the codes accepted)."""
    advice: NotRequired[str]
    """For the model: what to do and not to do next."""
    person_said: NotRequired[str]
    """A decline's reason, in the person's own words: theirs, not an instruction."""


class ActionRequest(TypedDict):
    """LangChain's action request: one per question, as Agent Chat UI renders it."""

    name: str
    """The tool (the card's title)."""
    args: dict[str, Any]
    """The arguments the card shows as fields, in the tool's order; after a refused
    answer, a last field says why it was refused and what approving runs now."""
    arguments: dict[str, Any]
    """The same as `args`, under the key Agent Inbox reads for its card's fields."""
    description: str
    """The preview as text: the refusal first, then title, fields, impact and expiry."""


class ReviewConfig(TypedDict):
    """LangChain's review config: which decisions the card offers."""

    action_name: str
    allowed_decisions: list[Literal["approve", "edit", "reject"]]


class RespondWith(TypedDict):
    """writegate's answers to this very question, ready to send as `Command(resume=...)`."""

    confirm: dict[str, Any]
    decline: dict[str, Any]
    cancel: dict[str, Any]
    edit: dict[str, Any]
    """With the current arguments under `args`: change them and send it."""


class ApprovalRequest(TypedDict):
    """The interrupt value of a write's question (`interrupt(value)`), one per write call."""

    type: Literal["writegate.approval"]
    """Tells writegate's questions apart from any other interrupt in the graph."""
    proposal_id: str
    """The proposal asked about; an answer naming another is refused."""
    tool_call_id: str
    """The model's tool call that asked for it."""
    operation: str
    """The tool."""
    resource: str
    """The resource it acts on."""
    args: dict[str, Any]
    """The canonical arguments that run, exactly."""
    args_digest: str
    """`sha256:` of the arguments' canonical JSON (RFC 8785): bound into the confirmation."""
    preview: PreviewView
    """What the person sees."""
    policy_version: str
    """The approval policy the proposal was assessed under."""
    expires_at: str
    """When the question lapses (RFC 3339, the database's clock; right-open)."""
    expires_after: str
    """How long a proposal of this tool waits, in words ("15 minutes")."""
    respond_with: RespondWith
    """writegate's answers to this question."""
    action_requests: list[ActionRequest]
    """LangChain's shape: the one action this question is about."""
    review_configs: list[ReviewConfig]
    """LangChain's shape: the decisions allowed."""
    error: NotRequired[ErrorBody]
    """Why the last answer was refused; the same question stands."""
    awaiting: NotRequired[dict[str, str]]
    """Set when the requester confirmed and a second approver must approve first."""


# -- answers in LangChain's shape: Agent Chat UI and LangGraph Studio send these ----------


class ApproveDecision(TypedDict):
    """LangChain's approve: confirm the proposal exactly as previewed."""

    type: Literal["approve"]
    retyped: NotRequired[str]
    """The key field typed again, when the proposal's tier asks for it."""


class RejectDecision(TypedDict):
    """LangChain's reject: nothing runs; the model is told `declined`."""

    type: Literal["reject"]
    message: NotRequired[str]
    """The person's reason: told to the model as theirs (`person_said`) and audited."""


class EditedAction(TypedDict):
    """The call as the person edited it."""

    name: str
    """The tool asked about."""
    args: dict[str, Any]
    """The whole argument set, as edited (form strings are read as their field's type)."""


class EditDecision(TypedDict):
    """LangChain's edit: in writegate a new proposal, asked again with its own preview."""

    type: Literal["edit"]
    edited_action: EditedAction
    """The tool and its whole argument set, as edited."""


class HitlDecisions(TypedDict):
    """LangChain's answer: exactly one decision, for the question asked."""

    decisions: list[ApproveDecision | RejectDecision | EditDecision]


__all__ = [
    "ActionRequest",
    "ApprovalRequest",
    "ApproveDecision",
    "EditDecision",
    "EditedAction",
    "ErrorBody",
    "HitlDecisions",
    "PreviewFieldView",
    "PreviewView",
    "RejectDecision",
    "RespondWith",
    "ReviewConfig",
]
