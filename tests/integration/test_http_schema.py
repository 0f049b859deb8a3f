"""The OpenAPI document is accurate: schemathesis against the live app finds no 5xx
and no response that breaks the schema (status codes, content types, bodies, auth).

The run is reproducible: schemathesis seeds Hypothesis itself (which overrides
`derandomize`), so the seed is pinned here and printed with every run; set
WRITEGATE_SCHEMA_SEED to try another one.

A "negative" case is judged by the request as it went out on the wire. Schemathesis
may generate an undocumented query parameter whose value the client drops when it
encodes the URL (`[]`, `[None]`, `[[], {}]`), or a null that goes out as the valid id
`null`; the server is right to accept what it actually received. So when only the
query was negative, the sent query string is validated with the route's own query
model, and the negative-data check is skipped only if that request is valid.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
import schemathesis
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from pydantic import ValidationError
from schemathesis import checks
from schemathesis.core.parameters import ParameterLocation

from tests.integration.http_fixtures import make_key, new_order, seeded_database, sse_events
from writegate.demo.runtime import open_demo
from writegate.surfaces.web import Settings, create_app
from writegate.surfaces.web.app import API_ROUTERS
from writegate.surfaces.web.inputs import query_model
from writegate.surfaces.web.services import Services

# Small on purpose: every operation is exercised, and the whole run stays well under 60 s.
EXAMPLES_PER_OPERATION = 12
SEED = int(os.environ.get("WRITEGATE_SCHEMA_SEED", "20261130"))

# The schema is read at import time, before any database exists; the fixture below
# gives this same app its runtime, so the cases run against the real service.
APP = create_app(settings=Settings())
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)
schema.config.seed = SEED
checks.load_all_checks()
NEGATIVE_DATA_REJECTION = checks.negative_data_rejection
POSITIVE_DATA_ACCEPTANCE = checks.positive_data_acceptance
# Statuses each operation answered during the run, to show which ones it reached.
ANSWERS: dict[str, set[int]] = {}
# Answers that never reach an existing object: no key, no such object, bad input.
NOT_REACHED = {401, 404, 405, 422}


def route_of(case: Any) -> APIRoute:
    for route in (route for router in API_ROUTERS for route in router.routes):
        if (
            isinstance(route, APIRoute)
            and route.path == case.operation.path
            and case.operation.method.upper() in route.methods
        ):
            return route
    raise AssertionError(f"no route serves {case.operation.label}")


def negative_locations(case: Any) -> set[ParameterLocation]:
    """Where a negative case broke the schema, as far as its metadata says."""
    meta = case.meta
    found = {loc for loc, info in meta.components.items() if info.mode.is_negative}
    if meta.phase.data.parameter_location is not None:
        found.add(meta.phase.data.parameter_location)
    return found


def sent_query_is_valid(route: APIRoute, url: str) -> bool:
    """Would the route accept this query string? Same rules as the server: each
    parameter once, and the route's query model (unknown names refused)."""
    pairs = parse_qsl(urlsplit(url).query, keep_blank_values=True)
    names = [name for name, _ in pairs]
    if len(names) != len(set(names)):
        return False
    try:
        query_model(route).model_validate(dict(pairs))
    except ValidationError:
        return False
    return True


def declares_headers(dependant: Any) -> bool:
    """Does the route read a header parameter of its own (not the bearer key)?"""
    return bool(dependant.header_params) or any(map(declares_headers, dependant.dependencies))


def sent_request_is_valid(case: Any, sent_url: str) -> bool:
    """A negative case whose broken parts did not survive the trip to the wire.

    Only the query and the headers are judged: the query with the route's query model;
    headers only on routes that read none, where the one header that counts is the
    bearer key this test always sends. Anything else keeps its negative-data check."""
    route, broken = route_of(case), negative_locations(case)
    if not broken or not broken <= {ParameterLocation.QUERY, ParameterLocation.HEADER}:
        return False
    if ParameterLocation.HEADER in broken and declares_headers(route.dependant):
        return False
    return sent_query_is_valid(route, sent_url)


def edit_args_refused(case: Any, response: Any) -> bool:
    """An edit's args are validated against the proposal's own tool, which one document
    for every proposal cannot spell out; refusing ones that do not fit is right."""
    return (
        case.operation.label == "POST /v1/approvals/{proposal_id}/decision"
        and isinstance(case.body, dict)
        and case.body.get("action") == "edit"
        and response.status_code == 422
    )


def checks_to_skip(case: Any, response: Any) -> list[Any]:
    """The negative-data check is skipped only when the request as sent was valid."""
    skipped = []
    if case.meta.generation.mode.is_negative and sent_request_is_valid(case, response.request.url):
        skipped.append(NEGATIVE_DATA_REJECTION)
    if edit_args_refused(case, response):
        skipped.append(POSITIVE_DATA_ACCEPTANCE)
    return skipped


@dataclass(frozen=True)
class Seeded:
    """Real objects of the caller's, so path ids can name things that exist."""

    headers: dict[str, str]
    ids: dict[str, tuple[str, ...]]
    resume_ids: dict[str, str]  # a thread's stream: the id of its next-to-last event

    def use_real_ids(self, case: Any) -> None:
        """A positive case names real objects; which one is chosen by its made-up id,
        so a run stays reproducible. Negative cases keep their ids (422 is the point).
        A list's cursor is opaque and only the server makes one (a made-up one is refused,
        422): a positive case asks for the first page instead."""
        if not case.meta.generation.mode.is_positive:
            return
        if case.query and "cursor" in case.query:
            case.query = {k: v for k, v in case.query.items() if k != "cursor"}
        if not case.path_parameters:
            return
        for name, made_up in list(case.path_parameters.items()):
            choices = self.ids.get(name)
            if choices:
                pick = zlib.crc32(str(made_up).encode()) % len(choices)
                case.path_parameters = {**case.path_parameters, name: choices[pick]}
        thread = case.path_parameters.get("thread_id")
        if case.headers and "Last-Event-ID" in case.headers and thread in self.resume_ids:
            case.headers = {**case.headers, "Last-Event-ID": self.resume_ids[thread]}


def ask_for_refund(client: TestClient, headers: dict[str, str], url: str) -> tuple[str, str, str]:
    """A thread whose turn stopped at a refund approval: (thread id, proposal id, the id
    of its stream's next-to-last event)."""
    thread = client.post("/v1/threads", headers=headers).json()["thread_id"]
    text = f"refund 10.00 CNY of {new_order(url)} because it arrived broken"
    reply = client.post(f"/v1/threads/{thread}/messages", headers=headers, json={"content": text})
    kind, end = sse_events(reply.text)[-1]
    assert kind == "end" and end["status"] == "awaiting_approval", reply.text
    event_ids = [line[4:] for line in reply.text.splitlines() if line.startswith("id: ")]
    return thread, end["pending"][0]["proposal_id"], event_ids[-2]


@pytest.fixture(scope="module")
def seeded(create_database: Callable[[], str]) -> Iterator[Seeded]:
    print(f"schemathesis seed {SEED} (set WRITEGATE_SCHEMA_SEED to change it)")
    url = seeded_database(create_database)
    runtime = open_demo(url, setup=False).runtime
    APP.state.wg = Services.build(runtime, Settings())
    headers = {"Authorization": "Bearer " + make_key(url, "user_42", roles=("approver",))}
    client = TestClient(APP)
    waiting_thread, pending, waiting_resume = ask_for_refund(client, headers, url)
    done_thread, executed, done_resume = ask_for_refund(client, headers, url)
    confirmed = client.post(
        f"/v1/approvals/{executed}/decision",
        headers={**headers, "Idempotency-Key": "seed-confirm"},
        json={"action": "confirm"},
    )
    assert confirmed.status_code == 200, confirmed.text
    ids = {
        "thread_id": (done_thread, waiting_thread),
        "proposal_id": (pending, executed),
        "execution_id": (confirmed.json()["receipt"]["execution_id"],),
    }
    yield Seeded(headers, ids, {waiting_thread: waiting_resume, done_thread: done_resume})
    del APP.state.wg
    runtime.close()


@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_api_matches_its_openapi_document(case: Any, seeded: Seeded) -> None:
    seeded.use_real_ids(case)
    auth_headers = seeded.headers
    response = case.call(headers=auth_headers)
    ANSWERS.setdefault(case.operation.label, set()).add(response.status_code)
    case.validate_response(
        response,
        headers=auth_headers,
        excluded_checks=checks_to_skip(case, response),
        transport_kwargs={"headers": dict(auth_headers)},
    )


def test_the_run_reached_every_operation_on_existing_objects() -> None:
    """Runs after the schemathesis test (file order): each operation answered at least
    once about a real object, not only 404 for made-up ids or 422 for bad input."""
    assert ANSWERS, "run this module whole: the schemathesis test records the answers"
    unreached = {op: sorted(codes) for op, codes in ANSWERS.items() if codes <= NOT_REACHED}
    assert unreached == {}, unreached


def test_a_query_value_the_client_drops_leaves_a_valid_request(seeded: Seeded) -> None:
    auth_headers = seeded.headers
    operation = schema["/v1/threads"]["GET"]
    route = route_of(operation.Case())
    for dropped in ([], [None], [[], {}]):
        response = operation.Case(query={"limit": 113, "extra": dropped}).call(headers=auth_headers)
        assert urlsplit(response.request.url).query == "limit=113"
        assert sent_query_is_valid(route, response.request.url)
        assert response.status_code == 200
    for sent in ({"limit": 113, "extra": ""}, {"limit": [1, 2]}, {"limit": 0}):
        response = operation.Case(query=sent).call(headers=auth_headers)
        assert not sent_query_is_valid(route, response.request.url)
        assert response.status_code == 422, response.text
