"""`writegate keys list` and `writegate keys revoke` against a real database: a listing
never shows a secret, and a revoked key is refused by the HTTP service at once."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import psycopg
import pytest
import typer
from click.testing import Result
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from tests.integration.http_fixtures import seeded_database
from writegate.demo.runtime import open_demo
from writegate.surfaces.cli import serve as cli_serve
from writegate.surfaces.web import create_app


@pytest.fixture(scope="module")
def url(create_database: Callable[[], str]) -> str:
    return seeded_database(create_database)


@pytest.fixture(scope="module")
def keys() -> Callable[..., Result]:
    app = typer.Typer()
    cli_serve.register(app)

    def run(url: str, *args: str) -> Result:
        return CliRunner().invoke(app, ["keys", *args], env={"DATABASE_URL": url})

    return run


@pytest.fixture(scope="module")
def client(url: str) -> Iterator[TestClient]:
    runtime = open_demo(url, setup=False).runtime
    with TestClient(create_app(runtime)) as test_client:
        yield test_client
    runtime.close()


def _create(keys: Callable[..., Result], url: str, user: str, *roles: str) -> tuple[str, str]:
    """(secret, key id) of a new key, through the CLI as a person would."""
    extra = [arg for role in roles for arg in ("--role", role)]
    made = keys(url, "create", "--user", user, "--tenant", "tenant_hz", *extra)
    assert made.exit_code == 0, made.output
    secret = made.stdout.strip()
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT key_id FROM writegate.api_keys WHERE created_at = "
            "(SELECT max(created_at) FROM writegate.api_keys WHERE user_id = %s)",
            (user,),
        ).fetchone()
    assert row is not None
    return secret, row[0]


def test_a_revoked_key_is_refused_by_the_http_service(
    url: str, keys: Callable[..., Result], client: TestClient
) -> None:
    secret, key_id = _create(keys, url, "user_42", "approver")
    other_secret, _ = _create(keys, url, "user_7")
    bearer = {"Authorization": f"Bearer {secret}"}
    assert client.get("/v1/threads", headers=bearer).status_code == 200

    revoked = keys(url, "revoke", key_id)
    assert revoked.exit_code == 0, revoked.output
    assert key_id in revoked.output

    refused = client.get("/v1/threads", headers=bearer)
    assert refused.status_code == 401 and refused.json()["code"] == "unauthorized"
    other = {"Authorization": f"Bearer {other_secret}"}
    assert client.get("/v1/threads", headers=other).status_code == 200  # only that key

    again = keys(url, "revoke", key_id)  # already revoked: said so, nothing changes
    assert again.exit_code == 0 and "already revoked" in again.output
    missing = keys(url, "revoke", "key_nosuchkey")
    assert missing.exit_code == 2 and "not_found" in missing.output


def test_keys_list_shows_who_and_when_but_never_a_secret(
    url: str, keys: Callable[..., Result]
) -> None:
    secret, key_id = _create(keys, url, "user_42", "approver", "admin")
    kept_secret, kept_id = _create(keys, url, "user_42")
    assert keys(url, "revoke", key_id).exit_code == 0

    listed = keys(url, "list")
    assert listed.exit_code == 0, listed.output
    out: str = listed.output
    assert secret not in out and kept_secret not in out
    assert secret[:12] not in out and "wgk_" not in out  # not even a piece of one
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("key_")}
    assert {key_id, kept_id} <= lines.keys()
    assert "user_42" in lines[key_id] and "tenant_hz" in lines[key_id]
    assert "admin,approver" in lines[key_id] and "revoked" in lines[key_id]
    assert "active" in lines[kept_id]

    active = keys(url, "list", "--active")
    assert key_id not in active.output and kept_id in active.output
