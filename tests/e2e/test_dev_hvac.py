"""`trellis dev` as a new user meets it: hvac with only the URL and a token, policies that say
no, and a data dir that keeps every secret across a restart without any plaintext in it."""

from __future__ import annotations

from pathlib import Path

import hvac
import hvac.exceptions
import pytest

from tests.procs import dev

pytestmark = pytest.mark.e2e

SECRET = "correct-horse-battery-staple-7f3a"


def test_hvac_policy_kv_and_persistence(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with dev("--data-dir", str(data_dir), "--root-token", "dev-root", "--services", "none") as d:
        assert d.root_token == "dev-root"
        root = hvac.Client(url=d.secrets, token=d.root_token)
        assert root.is_authenticated()
        assert root.sys.read_health_status(method="GET")["sealed"] is False
        root.sys.create_or_update_policy(
            name="app-read-write",
            policy='path "secret/data/app/*" { capabilities = ["create", "read", "update"] }',
        )
        token = root.auth.token.create(policies=["app-read-write"], ttl="1h")["auth"][
            "client_token"
        ]
        app = hvac.Client(url=d.secrets, token=token)
        app.secrets.kv.v2.create_or_update_secret(path="app/db", secret={"password": SECRET})
        got = app.secrets.kv.v2.read_secret_version(path="app/db", raise_on_deleted_version=True)
        assert got["data"]["data"] == {"password": SECRET}
        with pytest.raises(hvac.exceptions.Forbidden):
            app.secrets.kv.v2.read_secret_version(path="other/db", raise_on_deleted_version=True)
        with pytest.raises(hvac.exceptions.Forbidden):
            app.sys.list_mounted_secrets_engines()
        assert "secret/" in root.sys.list_mounted_secrets_engines()["data"]
    # Nothing readable reaches JetStream's files.
    for f in data_dir.rglob("*"):
        if f.is_file() and f.name != "dev-keys.json" and f.suffix != ".log":
            assert SECRET.encode() not in f.read_bytes(), f
    with dev("--data-dir", str(data_dir), "--services", "none") as d:
        app = hvac.Client(url=d.secrets, token=token)
        got = app.secrets.kv.v2.read_secret_version(path="app/db", raise_on_deleted_version=True)
        assert got["data"]["data"] == {"password": SECRET}
