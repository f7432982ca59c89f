"""KV version 1 through the real gateway, and the tune that upgrades a mount to version 2
without losing its data (on every replica)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from tests.harness import Cluster, start_cluster

pytestmark = pytest.mark.nats


async def mount_v1(c: Cluster, path: str = "kv1") -> None:
    status, body = await c.request(
        "POST", f"/v1/sys/mounts/{path}", json={"type": "kv", "options": {"version": "1"}}
    )
    assert status == 204, body


async def wait_unsealed(c: Cluster) -> None:
    """A replica added later unseals itself from its peers; wait until it serves mounts."""
    for _ in range(200):
        if all(
            s.core is not None and not s.core.barrier.sealed and s.core.tables for s in c.secrets
        ):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("a secrets replica stayed sealed")


async def wait_all_replicas(c: Cluster, check: Callable[[Any], bool]) -> None:
    """Mount changes reach the other replicas by an asynchronous invalidation; wait for it."""
    for _ in range(200):
        if all(
            s.core is not None and check(s.core.tables["root"].backends.get("legacy/"))
            for s in c.secrets
        ):
            return
        await asyncio.sleep(0.02)
    raise AssertionError("a replica did not pick up the mount change")


async def test_v1_read_write_list_delete(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        await mount_v1(c)
        status, _ = await c.request("POST", "/v1/kv1/app/db", json={"password": "p", "n": 1})
        assert status == 204
        status, _ = await c.request("PUT", "/v1/kv1/app/cache", json={"k": "v", "ttl": "1h"})
        assert status == 204
        status, _ = await c.request("POST", "/v1/kv1/top", json={"x": "y", "ttl": 90})
        assert status == 204

        status, body = await c.request("GET", "/v1/kv1/app/db")
        assert status == 200
        assert body["data"] == {"password": "p", "n": 1}
        assert body["lease_id"] == "" and body["lease_duration"] == 2764800
        assert body["renewable"] is False
        status, body = await c.request("GET", "/v1/kv1/app/cache")
        assert body["lease_duration"] == 3600 and body["data"]["ttl"] == "1h"
        status, body = await c.request("GET", "/v1/kv1/top")
        assert body["lease_duration"] == 90

        status, body = await c.request("LIST", "/v1/kv1/")
        assert body["data"]["keys"] == ["app/", "top"]
        status, body = await c.request("GET", "/v1/kv1?list=true")
        assert body["data"]["keys"] == ["app/", "top"]
        status, body = await c.request("LIST", "/v1/kv1/app")
        assert status == 200 and body["data"]["keys"] == ["cache", "db"], body
        status, body = await c.request("LIST", "/v1/kv1/app/db/")
        assert (status, body) == (404, {"errors": []})

        # An overwrite replaces the whole object.
        status, _ = await c.request("POST", "/v1/kv1/app/db", json={"password": "q"})
        status, body = await c.request("GET", "/v1/kv1/app/db")
        assert body["data"] == {"password": "q"}

        status, _ = await c.request("DELETE", "/v1/kv1/app/db")
        assert status == 204
        status, body = await c.request("GET", "/v1/kv1/app/db")
        assert (status, body) == (404, {"errors": []})
        status, _ = await c.request("DELETE", "/v1/kv1/app/db")
        assert status == 204

        status, body = await c.request("POST", "/v1/kv1/empty", json={})
        assert status == 400 and body["errors"] == ["missing data fields"]
        status, _ = await c.request("POST", "/v1/kv1/dir/", json={"a": 1})
        assert status == 400
        status, _ = await c.request("PATCH", "/v1/kv1/top", json={"a": 1})
        assert status == 405
        # v2 routes mean nothing on a v1 mount: data/x is just a key.
        status, _ = await c.request("GET", "/v1/kv1/data/top")
        assert status == 404

        # A kv mount without options is version 1, as in Vault.
        status, _ = await c.request("POST", "/v1/sys/mounts/plain", json={"type": "kv"})
        status, _ = await c.request("POST", "/v1/plain/k", json={"a": "b"})
        assert status == 204
        status, body = await c.request("GET", "/v1/plain/k")
        assert body["data"] == {"a": "b"}
    finally:
        await c.close()


async def test_tune_to_version_2_keeps_the_data_on_every_replica(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        await c.add_secrets_replica()
        await wait_unsealed(c)
        await mount_v1(c, "legacy")
        await wait_all_replicas(c, lambda b: b is not None)
        entries = {"a": {"v": "1"}, "dir/b": {"v": "2", "ttl": "5m"}, "dir/deep/c": {"v": "3"}}
        for path, data in entries.items():
            status, _ = await c.request("POST", f"/v1/legacy/{path}", json=data)
            assert status == 204

        status, body = await c.request(
            "POST", "/v1/sys/mounts/legacy/tune", json={"options": {"version": "2"}}
        )
        assert status == 204, body
        await wait_all_replicas(c, lambda b: b is not None and b.version == 2)
        status, body = await c.request("GET", "/v1/sys/mounts/legacy/tune")
        assert body["data"]["options"] == {"version": "2"}
        # Several reads, so both replicas answer some of them.
        for _ in range(3):
            for path, data in entries.items():
                status, body = await c.request("GET", f"/v1/legacy/data/{path}")
                assert status == 200, (path, body)
                assert body["data"]["data"] == data
                assert body["data"]["metadata"]["version"] == 1
        status, body = await c.request("LIST", "/v1/legacy/metadata/dir/")
        assert body["data"]["keys"] == ["b", "deep/"]
        status, _ = await c.request("GET", "/v1/legacy/a")  # v1 style is gone
        assert status == 404
        status, body = await c.request(
            "POST", "/v1/legacy/data/a", json={"data": {"v": "new"}, "options": {"cas": 1}}
        )
        assert status == 200 and body["data"]["version"] == 2

        status, body = await c.request(
            "POST", "/v1/sys/mounts/legacy/tune", json={"options": {"version": "1"}}
        )
        assert status == 400  # no downgrade
    finally:
        await c.close()
