"""What clients send: request bodies and query strings, as strict pydantic models.

Unknown fields and unknown query parameters are refused (422), so a body that names a
user or tenant never slips through: identity comes from the API key alone. Ids and
idempotency keys are short printable tokens, refused before they reach SQL.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any, Literal

from fastapi import Request
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field, field_validator

from writegate.approval.canonical import check_input
from writegate.approval.views import PageArgs

# Ids are short printable tokens; anything else is refused before it reaches SQL.
ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,128}$"
# Free text (a message, a reason): no control characters but tab, newline and carriage
# return, as in canonical JSON; stated in the schema so clients know before they send.
TEXT_PATTERN = r"^[^\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]*$"
# Idempotency keys: 1-200 visible ASCII characters (a UUID is the usual choice).
IDEMPOTENCY_KEY_PATTERN = r"^[!-~]{1,200}$"


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _storable_text(value: str | None) -> str | None:
    """Text that the ledger, a checkpoint and a terminal can carry: the canonical rules
    (TEXT_PATTERN, and no lone surrogates, which a JSON schema cannot express)."""
    if value is not None:
        check_input(value)  # a ValueError: FastAPI answers 422 validation_failed
    return value


class MessageIn(_In):
    content: str = Field(min_length=1, max_length=4000, pattern=TEXT_PATTERN)

    _content = field_validator("content")(_storable_text)


# -- decisions ------------------------------------------------------------------------


class ConfirmIn(_In):
    action: Literal["confirm"]
    retyped: str | None = Field(
        default=None,
        max_length=200,
        pattern=TEXT_PATTERN,
        description="The key field typed again, when the approval's tier asks for it "
        "(`confirmation.retype_field`).",
    )

    _retyped = field_validator("retyped")(_storable_text)


class DeclineIn(_In):
    action: Literal["decline"]
    reason: str | None = Field(default=None, max_length=2000, pattern=TEXT_PATTERN)

    _reason = field_validator("reason")(_storable_text)


class CancelIn(_In):
    action: Literal["cancel"]


class EditIn(_In):
    action: Literal["edit"]
    args: dict[str, Any] = Field(description="The complete new arguments; previewed again.")


DecisionIn = Annotated[ConfirmIn | DeclineIn | CancelIn | EditIn, Field(discriminator="action")]


class ReviewIn(_In):
    """A second approver's answer on someone else's confirmed proposal."""

    action: Literal["approve", "decline"]


# -- query strings (unknown parameters are refused, like unknown body fields) --------


class PageQuery(_In):
    """A list a page at a time (docs/paging.md)."""

    cursor: str | None = Field(
        default=None,
        max_length=512,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="The previous page's next_cursor, unchanged; none for the first page.",
    )
    order: Literal["oldest", "newest"] = Field(default="oldest", description="Which end first.")

    def page_args(self, *skip: str) -> PageArgs:
        """The page this query asks for; `skip`: its fields that are not a page's."""
        return PageArgs(**self.model_dump(exclude_none=True, exclude=set(skip)))


class ThreadQuery(PageQuery):
    order: Literal["oldest", "newest"] = Field(default="newest", description="Which end first.")
    limit: int = Field(default=50, ge=1, le=200)


class ApprovalQuery(PageQuery):
    status: Literal[
        "pending", "all", "awaiting_confirmation", "awaiting_second_approval", "confirmed",
        "executed", "declined", "cancelled", "expired", "superseded", "revoked",
    ] = Field(
        default="pending",
        description="pending: awaiting a decision, not expired, with a question open in "
        "its thread; all: every approval, any status (history); or only those in one status.",
    )  # fmt: skip
    order: Literal["oldest", "newest"] | None = Field(  # type: ignore[assignment]  # None: by status
        default=None, description="Which end first; by default oldest for pending, else newest."
    )
    thread_id: str | None = Field(default=None, pattern=ID_PATTERN)
    proposal_id: str | None = Field(default=None, pattern=ID_PATTERN)
    tool_name: str | None = Field(default=None, pattern=ID_PATTERN)
    limit: int = Field(default=50, ge=1, le=200)

    def page_args(self, *skip: str) -> PageArgs:
        order = self.order or ("oldest" if self.status == "pending" else "newest")
        status = None if self.status in ("pending", "all") else self.status
        args = super().page_args("status", "order", *skip)
        return replace(args, order=order, status=status)


class AuditQuery(PageQuery):
    thread_id: str | None = Field(default=None, pattern=ID_PATTERN)
    proposal_id: str | None = Field(default=None, pattern=ID_PATTERN)
    tool_name: str | None = Field(default=None, pattern=ID_PATTERN)
    status: str | None = Field(default=None, pattern=ID_PATTERN)
    limit: int = Field(default=200, ge=1, le=500)


class ReviewQuery(PageQuery):
    thread_id: str | None = Field(default=None, pattern=ID_PATTERN)
    proposal_id: str | None = Field(default=None, pattern=ID_PATTERN)
    tool_name: str | None = Field(default=None, pattern=ID_PATTERN)
    limit: int = Field(default=50, ge=1, le=200)


class NoQuery(_In):
    """The query of a route that takes no parameters: any parameter is refused."""


def query_model(route: APIRoute) -> type[BaseModel]:
    """The model that validates a route's query string. Every route that reads a query
    declares it as one model; a route that declares none takes no parameters."""
    return _declared_query(route.dependant) or NoQuery


def _declared_query(dependant: Dependant) -> type[BaseModel] | None:
    for param in dependant.query_params:
        annotation = param.field_info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return annotation
    return next(filter(None, map(_declared_query, dependant.dependencies)), None)


async def refuse_unknown_query(request: Request) -> None:
    """A dependency for every API route: a query parameter the route does not declare is
    refused (422), even on routes that read no query, so nothing sent is silently ignored.
    A coroutine, as it does no I/O: no thread-pool hop on every request."""
    route = request.scope.get("route")
    model = query_model(route) if isinstance(route, APIRoute) else NoQuery
    known = {field.alias or name for name, field in model.model_fields.items()}
    unknown = [name for name in request.query_params if name not in known]
    if unknown:
        raise RequestValidationError(
            [
                {"type": "extra_forbidden", "loc": ("query", name), "msg": "unknown parameter"}
                for name in unknown
            ]
        )
