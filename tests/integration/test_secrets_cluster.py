"""Cluster behaviour of the secrets service: static auto-unseal, expiry that survives the
replica that issued a token, and the X-Svc-Request requirement."""

from __future__ import annotations

import asyncio
import base64
import os
import time

import aiohttp
import pytest

from services.secrets.core.namespaces import ROOT
from shared.settings import SealSettings
from tests.harness import start_cluster

pytestmark = pytest.mark.nats


async def _until(pred, timeout: float = 15.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await pred():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met before the deadline")


async def test_static_seal_unseals_every_replica_by_itself(nats_url: str) -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    c = await start_cluster(
        nats_url, replicas=2, initialize=False, seal=SealSettings(type="static", key=key)
    )
    try:
        status, body = await c.request("POST", "/v1/sys/init", token="", json={})
        assert status == 200 and body["keys"] == [] and body["root_token"]
        c.root_token = body["root_token"]

        async def unsealed() -> bool:
            # Sealed as clients see it (tables loaded too), not just the barrier open.
            return all(not s.core.sealed for s in c.secrets)  # type: ignore[union-attr]

        await _until(unsealed)
        status, body = await c.request("GET", "/v1/sys/seal-status", token="")
        assert body.get("type") == "static" and body["sealed"] is False, body
        # A replica that starts later unseals itself from the static key.
        late = await c.add_secrets_replica()
        assert late.core is not None and not late.core.barrier.sealed
        status, _ = await c.request("GET", "/v1/sys/mounts")
        assert status == 200
    finally:
        await c.close()


async def test_token_expiry_survives_the_issuing_replica(nats_url: str) -> None:
    c = await start_cluster(nats_url, replicas=2)
    try:
        leader = next(s for s in c.secrets if s.lease and s.lease.is_leader)
        other = next(s for s in c.secrets if s is not leader)
        status, body = await c.request("POST", "/v1/auth/token/create", json={"ttl": "3s"})
        token = body["auth"]["client_token"]
        assert other.core is not None
        key = f"id/{other.core.tokens.hash(token)}"
        view = other.core.namespaces.view(ROOT).sub("sys/token/")
        assert await view.get(key) is not None
        # The leader of expiry goes away; the other replica takes over and revokes on time.
        await c.stop_secrets_replica(leader)

        async def gone() -> bool:
            return await view.get(key) is None

        try:
            await _until(gone, timeout=30)
        except AssertionError:
            exp = other.core.expiration
            raise AssertionError(
                f"leader={other.lease.is_leader} task={exp._task} "
                f"sealed={other.core.barrier.sealed} "
                f"at={await exp.view.list_all('at/')}"
            ) from None
        status, _ = await c.request("GET", "/v1/auth/token/lookup-self", token=token)
        assert status == 403
    finally:
        await c.close()


async def test_require_request_header(nats_url: str) -> None:
    c = await start_cluster(nats_url, require_request_header=True, initialize=False)
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(c.secrets_url + "/v1/sys/seal-status") as r:
                assert r.status == 412 and "X-Svc-Request" in (await r.json())["errors"][0]
            async with s.get(
                c.secrets_url + "/v1/sys/seal-status", headers={"X-Svc-Request": "true"}
            ) as r:
                assert r.status == 200
            async with s.get(
                c.secrets_url + "/v1/sys/seal-status", headers={"X-Vault-Request": "true"}
            ) as r:
                assert r.status == 200
    finally:
        await c.close()


async def test_revocation_reaches_every_replica_cache(nats_url: str) -> None:
    c = await start_cluster(nats_url, replicas=2)
    try:
        for _ in range(3):
            status, body = await c.request("POST", "/v1/auth/token/create", json={"ttl": "1h"})
            tok = body["auth"]["client_token"]
            # Warm both replicas' caches (the queue group spreads these).
            for _ in range(10):
                status, _ = await c.request("GET", "/v1/auth/token/lookup-self", token=tok)
                assert status == 200
            status, _ = await c.request("POST", "/v1/auth/token/revoke", json={"token": tok})
            assert status == 204
            for _ in range(10):
                status, _ = await c.request("GET", "/v1/auth/token/lookup-self", token=tok)
                assert status == 403
    finally:
        await c.close()


async def test_mount_changes_are_seen_at_once_on_every_replica(nats_url: str) -> None:
    """A client that disables and enables mounts and auth methods, one request after another,
    lands on either replica each time: the next request always sees the change (as hvac's own
    tests do it, setUp and tearDown around each test)."""
    c = await start_cluster(nats_url, replicas=2)
    try:
        for i in range(12):
            status, body = await c.request("POST", "/v1/sys/mounts/rw-kv", json={"type": "kv"})
            assert status == 204, (i, body)
            status, body = await c.request("PUT", "/v1/rw-kv/x", json={"v": str(i)})
            assert status == 204, (i, body)
            status, body = await c.request("GET", "/v1/sys/mounts")
            assert "rw-kv/" in body["data"], i
            status, body = await c.request(
                "POST", "/v1/sys/auth/rw-approle", json={"type": "approle"}
            )
            assert status == 204, (i, body)
            status, body = await c.request("GET", "/v1/sys/auth")
            assert "rw-approle/" in body["data"], (i, sorted(body["data"]))
            status, body = await c.request("DELETE", "/v1/sys/auth/rw-approle")
            assert status == 204, (i, body)
            status, body = await c.request("DELETE", "/v1/sys/mounts/rw-kv")
            assert status == 204, (i, body)
            status, body = await c.request("GET", "/v1/rw-kv/x")
            assert status == 404, (i, body)
    finally:
        await c.close()


async def test_seal_and_unseal_are_seen_at_once_on_every_replica(nats_url: str) -> None:
    """After sys/seal answers, no replica serves the next request; after the last unseal
    share is accepted, every replica serves the next one (whichever the queue group picks)."""
    c = await start_cluster(nats_url, replicas=2, shares=3, threshold=2)
    try:
        status, _ = await c.request("PUT", "/v1/secret/data/sealtest", json={"data": {"v": 1}})
        assert status == 200
        for i in range(4):
            status, body = await c.request("PUT", "/v1/sys/seal")
            assert status == 204, (i, body)
            for _ in range(6):
                status, body = await c.request("GET", "/v1/secret/data/sealtest")
                assert status == 503, (i, body)
            for key in c.unseal_keys[:2]:
                status, body = await c.request("PUT", "/v1/sys/unseal", token="", json={"key": key})
                assert status == 200, (i, body)
            assert body["sealed"] is False
            for _ in range(6):
                status, body = await c.request("GET", "/v1/secret/data/sealtest")
                assert status == 200 and body["data"]["data"] == {"v": 1}, (i, body)
    finally:
        await c.close()


async def test_an_unseal_reset_discards_the_shares_on_every_replica(nats_url: str) -> None:
    """hvac's test_unseal_multi: two shares, a reset, two other shares (progress 2, still
    sealed on whichever replica answers), then the third."""
    c = await start_cluster(nats_url, replicas=2, shares=5, threshold=3)
    try:
        keys = c.unseal_keys
        for i in range(3):
            status, _ = await c.request("PUT", "/v1/sys/seal")
            assert status == 204
            for key in keys[0:2]:
                status, body = await c.request("PUT", "/v1/sys/unseal", token="", json={"key": key})
            assert body["sealed"] is True and body["progress"] == 2, (i, body)
            status, body = await c.request("PUT", "/v1/sys/unseal", token="", json={"reset": True})
            assert status == 200 and body["progress"] == 0, (i, body)
            for key in keys[1:3]:
                status, body = await c.request("PUT", "/v1/sys/unseal", token="", json={"key": key})
                assert body["sealed"] is True, (i, body)
            assert body["progress"] == 2, (i, body)
            status, body = await c.request("PUT", "/v1/sys/unseal", token="", json={"key": keys[3]})
            assert status == 200 and body["sealed"] is False, (i, body)
            status, body = await c.request("GET", "/v1/secret/data/none-here")
            assert status == 404, (i, body)
    finally:
        await c.close()
