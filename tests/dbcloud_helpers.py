"""What the dbcloud tests share: the provider emulator in its own process (one organization,
one project), its API keys as it holds them, and a dbcloud mount configured against it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from tests.fakes.process import Fake, start_fake
from tests.harness import Cluster

PUB, PRIV = "adminpub", "admin-private-key"


@contextlib.asynccontextmanager
async def dbcloud_provider() -> AsyncIterator[Fake]:
    fake = await start_fake(
        "tests.fakes.dbcloud_provider",
        "--public-key",
        PUB,
        "--private-key",
        PRIV,
        "--org",
        "org1",
        "--project",
        "proj1=org1",
    )
    try:
        yield fake
    finally:
        await fake.stop()


async def provider_keys(fake: Fake) -> list[dict[str, Any]]:
    async with aiohttp.ClientSession() as s, s.get(fake.url + "/_emulator/keys") as r:
        return await r.json()


async def mount_dbcloud(c: Cluster, api_url: str, mount: str = "dbcloud") -> None:
    """Enable dbcloud at `mount` and configure it with the emulator's admin key."""
    status, body = await c.request("POST", f"/v1/sys/mounts/{mount}", json={"type": "dbcloud"})
    assert status == 204, body
    status, body = await c.request(
        "POST",
        f"/v1/{mount}/config",
        json={"public_key": PUB, "private_key": PRIV, "api_url": api_url},
    )
    assert status == 204, body
