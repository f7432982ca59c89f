"""The secrets core through the gateway: init, unseal, seal status, mounts, policies, errors."""

from __future__ import annotations

import pytest

from tests.harness import start_cluster

pytestmark = pytest.mark.nats


async def test_init_unseal_and_mounts(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        status, body = await c.request("GET", "/v1/sys/seal-status", token="")
        assert status == 200 and body["sealed"] is False and body["initialized"] is True
        status, body = await c.request("GET", "/v1/sys/mounts")
        assert status == 200, body
        assert body["data"]["secret/"]["type"] == "kv"
        assert body["data"]["secret/"]["options"] == {"version": "2"}
        assert "sys/" in body["data"] and "cubbyhole/" in body
    finally:
        await c.close()
