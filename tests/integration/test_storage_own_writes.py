"""API reads (shared/storage.py) against a real nats-server: a client's read of a key it wrote
lately takes only an answer that has its last write of the key (the race with an old stream
leader that answers from a stale copy is played in tests/unit/test_storage_stale_leader.py), and
the answers stay those of a plain read."""

from __future__ import annotations

import nats
import nats.js.errors
import pytest

from shared.storage import JetStreamStorage

pytestmark = pytest.mark.nats


async def test_api_reads_wait_for_the_clients_own_writes(nats_url: str, unique: str) -> None:
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        st = await JetStreamStorage.open(js, unique)
        st.direct = False  # read through the JetStream API, as on a replicated bucket
        other = JetStreamStorage(st.kv, js, unique, timeout=0.5)  # wrote nothing
        rev = await st.put("a/kept", b"one")
        gone = await st.put("a/deleted", b"x")
        await st.delete("a/deleted", revision=gone)
        await st.put("a/purged", b"x")
        await st.delete("a/purged")
        for reader in (st, other):
            got = await reader.get("a/kept")
            assert got is not None and (got.value, got.revision) == (b"one", rev)
            assert await reader.get("a/deleted") is None
            assert await reader.get("a/purged") is None
            assert await reader.get("a/never") is None

        # An answer without a write the client was acknowledged is not taken for the truth:
        # here the client was told of a later write of the key than the server has.
        other._remember("a/kept", rev + 100)
        with pytest.raises(nats.js.errors.ServiceUnavailableError):
            await other.get("a/kept")
        later = await other.put("a/kept", b"two")
        got = await other.get("a/kept")
        assert got is not None and (got.value, got.revision) == (b"two", later)
    finally:
        await nc.close()
