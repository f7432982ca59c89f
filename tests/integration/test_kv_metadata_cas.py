"""KV v2 metadata check-and-set, as OpenBao answers it: `current_metadata_version` counts
metadata writes, `metadata_cas` must match it when the key or the mount requires it, and a
given `metadata_cas` is always checked."""

from __future__ import annotations

from typing import Any

import pytest

from tests.harness import Cluster, start_cluster

pytestmark = pytest.mark.nats

REQUIRED = "metadata check-and-set parameter required for this call"
MISMATCH = "metadata check-and-set parameter does not match the current version"


async def _meta(c: Cluster, path: str) -> dict[str, Any]:
    status, out = await c.request("GET", f"/v1/secret/metadata/{path}")
    assert status == 200, out
    return out["data"]


async def _put(c: Cluster, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    return await c.request("POST", f"/v1/secret/metadata/{path}", json=body)


async def test_metadata_versions_and_check_and_set(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        status, _ = await c.request("POST", "/v1/secret/data/a", json={"data": {"x": 1}})
        assert status == 200
        meta = await _meta(c, "a")
        assert (meta["current_metadata_version"], meta["metadata_cas_required"]) == (0, False)
        assert (await _put(c, "a", {"max_versions": 3}))[0] == 204
        assert (await _meta(c, "a"))["current_metadata_version"] == 1
        assert (await _put(c, "a", {"metadata_cas_required": True}))[0] == 204

        status, out = await _put(c, "a", {"max_versions": 4})
        assert status == 400 and out["errors"] == [REQUIRED]
        status, out = await _put(c, "a", {"max_versions": 4, "metadata_cas": 1})
        assert status == 400 and out["errors"] == [MISMATCH]
        assert (await _put(c, "a", {"max_versions": 4, "metadata_cas": 2}))[0] == 204
        status, out = await c.request(
            "PATCH",
            "/v1/secret/metadata/a",
            json={"max_versions": 5},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert status == 400 and out["errors"] == [REQUIRED]
        # Data writes are not metadata writes.
        await c.request("POST", "/v1/secret/data/a", json={"data": {"x": 2}})
        meta = await _meta(c, "a")
        assert meta["current_metadata_version"] == 3 and meta["max_versions"] == 4

        # A new key: metadata_cas 0; the mount's switch binds every key and warns on false.
        assert (await _put(c, "b", {"max_versions": 2, "metadata_cas": 0}))[0] == 204
        assert (await _meta(c, "b"))["current_metadata_version"] == 1
        status, _ = await c.request(
            "POST", "/v1/secret/config", json={"metadata_cas_required": True}
        )
        assert status == 204
        status, cfg = await c.request("GET", "/v1/secret/config")
        assert cfg["data"]["metadata_cas_required"] is True
        status, out = await _put(c, "c", {"max_versions": 2})
        assert status == 400 and out["errors"] == [REQUIRED]
        status, out = await _put(
            c, "c", {"max_versions": 2, "metadata_cas": 0, "metadata_cas_required": False}
        )
        assert status == 200 and "mandated by backend config" in out["warnings"][0]
    finally:
        await c.close()
