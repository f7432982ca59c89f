"""Two `trellis dev` instances become DR primary and secondary with three API calls, and the
primary's writes show up on the secondary (last_remote_wal, merkle_root) within a second."""

from __future__ import annotations

import time
from typing import Any

import pytest
import requests

from tests.procs import dev

pytestmark = pytest.mark.e2e

DR = "/v1/sys/replication/dr/"


def call(base: str, method: str, path: str, token: str = "", **kw: Any) -> tuple[int, Any]:
    r = requests.request(
        method, base + path, headers={"X-Vault-Token": token} if token else {}, timeout=30, **kw
    )
    return r.status_code, (r.json() if r.content else None)


def test_two_dev_instances_pair_and_stream() -> None:
    with dev("--services", "replication") as a, dev("--services", "replication") as b:
        code, body = call(a.secrets, "POST", DR + "primary/enable", a.root_token, json={})
        assert code in (200, 204), body
        code, body = call(
            a.secrets, "POST", DR + "primary/secondary-token", a.root_token, json={"id": "dr-b"}
        )
        assert code == 200, body
        activation = body["wrap_info"]["token"]
        code, body = call(
            b.secrets, "POST", DR + "secondary/enable", b.root_token, json={"token": activation}
        )
        assert code == 200, body

        for i in range(5):
            code, _ = call(
                a.secrets, "POST", f"/v1/secret/data/app{i}", a.root_token, json={"data": {"i": i}}
            )
            assert code == 200
        _, primary = call(a.secrets, "GET", DR + "status")
        started = time.monotonic()
        deadline = started + 10
        while True:
            _, secondary = call(b.secrets, "GET", DR + "status")
            if (
                secondary["data"]["last_remote_wal"] >= primary["data"]["last_wal"]
                and secondary["data"]["merkle_root"] == primary["data"]["merkle_root"]
            ):
                break
            assert time.monotonic() < deadline, (primary, secondary)
            time.sleep(0.05)
        assert time.monotonic() - started < 1.0
        assert secondary["data"]["mode"] == "secondary"
        assert secondary["data"]["state"] == "stream-wals"
        # The secondary serves no client requests.
        code, body = call(b.secrets, "GET", "/v1/secret/data/app1", a.root_token)
        assert code == 400 and body["errors"]
