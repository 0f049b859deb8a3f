"""`writegate keys create` prints a key once and stores only its hash; `serve` reads
its settings from the environment and refuses bad ones."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import psycopg
import pytest
import typer
from typer.testing import CliRunner

from tests.integration.http_fixtures import seeded_database
from writegate.approval.canonical import hash_secret
from writegate.surfaces.cli import serve as cli_serve
from writegate.surfaces.web import Settings
from writegate.surfaces.web.services import TTL_ENV, SettingsError


def test_keys_create_prints_the_key_once_and_stores_its_hash(
    create_database: Callable[[], str],
) -> None:
    url = seeded_database(create_database)
    app = typer.Typer()
    cli_serve.register(app)
    args = ["keys", "create", "--user", "user_42", "--tenant", "tenant_hz", "--role", "approver"]
    result = CliRunner().invoke(app, args, env={"DATABASE_URL": url})
    assert result.exit_code == 0, result.output
    secret = result.stdout.strip()
    assert secret.startswith("wgk_") and "\n" not in secret
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT key_hash, user_id, tenant_id, roles FROM writegate.api_keys"
        ).fetchall()
    assert rows == [(hash_secret(secret), "user_42", "tenant_hz", ["approver"])]
    assert secret not in str(rows)

    bad = CliRunner().invoke(
        app, ["keys", "create", "--user", "x y", "--tenant", "t"], env={"DATABASE_URL": url}
    )
    assert bad.exit_code != 0


def test_serve_settings_come_from_the_environment() -> None:
    settings = Settings.from_env({TTL_ENV: "2.5", "DATABASE_URL": "postgresql://db/x"})
    assert settings.policy().proposal_ttl == timedelta(seconds=2.5)
    assert settings.database_url == "postgresql://db/x"
    assert Settings.from_env({}).policy().proposal_ttl == timedelta(minutes=15)
    for bad in ("soon", "0", "-3"):
        with pytest.raises(SettingsError):
            Settings.from_env({TTL_ENV: bad})
