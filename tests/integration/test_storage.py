"""JetStream KV storage: CAS, listing right after writes, deletes, watch."""

from __future__ import annotations

import asyncio

import nats
import pytest

from shared.storage import CasConflict, JetStreamStorage

pytestmark = pytest.mark.nats


async def test_storage_semantics(nats_url: str, unique: str) -> None:
    nc = await nats.connect(nats_url)
    try:
        st = await JetStreamStorage.open(nc.jetstream(), unique)
        assert await st.list("a/") == []
        rev = await st.create("a/x y", b"1")
        with pytest.raises(CasConflict):
            await st.create("a/x y", b"2")
        rev2 = await st.update("a/x y", b"2", rev)
        with pytest.raises(CasConflict):
            await st.update("a/x y", b"3", rev)
        got = await st.get("a/x y")
        assert got is not None and got.value == b"2" and got.revision == rev2
        await st.put("a/b/c", b"3")
        await st.put("z", b"4")
        assert await st.list("a/") == ["a/b/c", "a/x y"]
        await st.delete("a/b/c")
        assert await st.list("a/") == ["a/x y"]
        assert await st.get("a/b/c") is None
        with pytest.raises(CasConflict):
            await st.delete("a/x y", revision=rev)
        assert await st.last_revision() >= rev2
        # Listing straight after a burst of writes sees every one of them.
        for round_ in range(10):
            await asyncio.gather(*(st.put(f"burst{round_}/k{i}", b"v") for i in range(120)))
            assert len(await st.list(f"burst{round_}/")) == 120
    finally:
        await nc.close()
