"""Concurrent KV v2 writers of one key, through the real gateway and nats-server: on one replica
(queued and written together, without CAS conflicts) and on two replicas (the CAS between them).
Every acknowledged write gets its own version and stays readable; check-and-set has exactly one
winner per version; concurrent merge patches all land."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from prometheus_client import REGISTRY

from services.secrets.core.dispatch import handle_http
from shared.messages import HttpRequest
from tests.harness import Cluster, start_cluster

pytestmark = pytest.mark.nats

CAS_MISMATCH = "check-and-set parameter did not match the current version"


def conflicts() -> float:
    """KV record writes lost to a CAS conflict in this process (services/secrets/engines/kv)."""
    got = REGISTRY.get_sample_value("trellis_kv_record_writes_total", {"outcome": "conflict"})
    return got or 0.0


async def serving(c: Cluster) -> None:
    """Every replica unsealed with its mount table loaded."""
    deadline = asyncio.get_running_loop().time() + 15
    while not all(s.core is not None and not s.core.sealed and s.core.tables for s in c.secrets):
        assert asyncio.get_running_loop().time() < deadline, "a replica did not come up"
        await asyncio.sleep(0.02)


async def post(c: Cluster, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    return await c.request("POST", f"/v1/secret/data/{path}", json=body)


async def direct(c: Cluster, replica: int, path: str, body: bytes) -> tuple[int, bytes]:
    """A write handled by one chosen replica (the gateway would pick any)."""
    core = c.secrets[replica].core
    assert core is not None
    resp = await handle_http(
        core,
        HttpRequest(
            method="POST",
            path=f"/v1/secret/data/{path}",
            headers={"x-svc-token": c.root_token},
            body=body,
        ),
    )
    return resp.status, resp.body


async def test_one_replica_writers_of_one_key_get_distinct_versions(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        status, _ = await c.request("POST", "/v1/secret/config", json={"max_versions": 100})
        assert status == 204
        before = conflicts()
        results = await asyncio.gather(
            *(post(c, "same", {"data": {"writer": i}}) for i in range(40))
        )
        assert all(status == 200 for status, _ in results), results
        numbers = [body["data"]["version"] for _, body in results]
        assert sorted(numbers) == list(range(1, 41))
        assert conflicts() == before  # writers in one replica queue; they never collide
        for i, n in enumerate(numbers):
            status, body = await c.request("GET", f"/v1/secret/data/same?version={n}")
            assert status == 200 and body["data"]["data"] == {"writer": i}
        status, body = await c.request("GET", "/v1/secret/metadata/same")
        assert status == 200 and body["data"]["current_version"] == 40
    finally:
        await c.close()


async def test_one_replica_check_and_set_has_one_winner(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        for current in range(3):
            results = await asyncio.gather(
                *(
                    post(c, "cas", {"data": {"w": i}, "options": {"cas": current}})
                    for i in range(10)
                )
            )
            won = [body for status, body in results if status == 200]
            lost = [body for status, body in results if status != 200]
            assert len(won) == 1 and won[0]["data"]["version"] == current + 1
            assert all(CAS_MISMATCH in body["errors"][0] for body in lost)
            assert {status for status, _ in results} == {200, 400}
    finally:
        await c.close()


async def test_concurrent_merge_patches_all_land(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        status, _ = await post(c, "patched", {"data": {"base": 0}})
        assert status == 200
        results = await asyncio.gather(
            *(
                c.request(
                    "PATCH",
                    "/v1/secret/data/patched",
                    headers={"Content-Type": "application/merge-patch+json"},
                    json={"data": {f"f{i}": i}},
                )
                for i in range(12)
            )
        )
        assert all(status == 200 for status, _ in results), results
        status, body = await c.request("GET", "/v1/secret/data/patched")
        assert status == 200
        assert body["data"]["data"] == {"base": 0, **{f"f{i}": i for i in range(12)}}
        assert body["data"]["metadata"]["version"] == 13
    finally:
        await c.close()


async def test_two_replicas_check_and_set_has_one_winner(nats_url: str) -> None:
    c = await start_cluster(nats_url, replicas=2)
    try:
        await serving(c)
        for current in range(3):
            body = b'{"data": {"w": %d}, "options": {"cas": %d}}'
            results = await asyncio.gather(
                *(direct(c, i % 2, "shared", body % (i, current)) for i in range(10))
            )
            won = [out for status, out in results if status == 200]
            assert len(won) == 1, results
            version = re.search(rb'"version":(\d+)', won[0])
            assert version is not None and int(version.group(1)) == current + 1
            assert all(status == 400 for status, _ in results if status != 200)
        status, body = await c.request("GET", "/v1/secret/metadata/shared")
        assert status == 200 and body["data"]["current_version"] == 3
    finally:
        await c.close()
