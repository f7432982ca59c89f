"""Reads by Direct Get (shared/storage.py) on one-replica buckets: the same answers as the
JetStream API's read for present, empty, deleted, purged and missing keys, every acknowledged
write visible to the very next read, and a bucket made before Direct Get was on gets it on
open."""

from __future__ import annotations

import nats
import pytest
from nats.js.api import KeyValueConfig, StorageType

from shared.storage import JetStreamStorage, encode_key

pytestmark = pytest.mark.nats


async def test_direct_reads_answer_as_the_api_does(nats_url: str, unique: str) -> None:
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        st = await JetStreamStorage.open(js, unique)
        assert st.direct
        api = JetStreamStorage(st.kv, js, unique)  # the same bucket read through the API
        rev = await st.put("a/kept", b"value")
        await st.put("a/empty", b"")
        gone = await st.put("a/deleted", b"x")
        await st.delete("a/deleted", revision=gone)  # a delete marker
        await st.put("a/purged", b"x")
        await st.delete("a/purged")  # a purge
        for key in ("a/kept", "a/empty", "a/deleted", "a/purged", "a/never"):
            by_api = await api.get(key)
            assert await st._get_direct(key, f"$KV.{unique}.{encode_key(key)}") == by_api, key
            assert await st.get(key) == by_api, key
        kept = await st.get("a/kept")
        assert kept is not None and (kept.value, kept.revision) == (b"value", rev)
        empty = await st.get("a/empty")
        assert empty is not None and empty.value == b""

        for i in range(50):
            written = await st.put("a/counter", str(i).encode())
            got = await st.get("a/counter")
            assert got is not None and (got.value, got.revision) == (str(i).encode(), written)
    finally:
        await nc.close()


async def test_an_older_bucket_gets_direct_reads_on_open(nats_url: str, unique: str) -> None:
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        await js.create_key_value(
            KeyValueConfig(bucket=unique, history=1, replicas=1, storage=StorageType.FILE)
        )
        assert not (await js.stream_info(f"KV_{unique}")).config.allow_direct
        st = await JetStreamStorage.open(js, unique)
        assert st.direct
        assert (await js.stream_info(f"KV_{unique}")).config.allow_direct
        rev = await st.put("k", b"v")
        got = await st.get("k")
        assert got is not None and (got.value, got.revision) == (b"v", rev)
    finally:
        await nc.close()
