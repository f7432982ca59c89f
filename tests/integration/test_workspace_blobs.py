"""The workspace's blob store against a real nats-server: a read racing the blob's deletion
ends (a miss) instead of waiting for chunks that will never come."""

from __future__ import annotations

import asyncio
from typing import Any

import nats
import pytest
from nats.js.object_store import ObjectStore

from services.workspace import blobs
from services.workspace.blobs import BlobStore

pytestmark = pytest.mark.nats


async def test_a_read_racing_the_delete_is_a_miss(
    nats_url: str, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    nc = await nats.connect(nats_url)
    try:
        store = BlobStore(nc.jetstream(), unique, 1)
        await store.put("plan", b"sealed plan file")
        assert await store.get("plan") == b"sealed plan file"
        # The delete lands just after the read took the object's info (nats-py then waits for
        # the chunks of that version).
        real_info = ObjectStore.get_info
        raced: list[str] = []

        async def info_then_delete(self: ObjectStore, name: str, *args: Any) -> Any:
            info = await real_info(self, name, *args)
            if not raced:
                raced.append(name)
                await store.delete(name)
            return info

        monkeypatch.setattr(ObjectStore, "get_info", info_then_delete)
        monkeypatch.setattr(blobs, "READ_SECONDS", 1.0)
        assert await asyncio.wait_for(store.get("plan"), 30) is None
        assert raced == ["plan"]
    finally:
        await nc.close()
