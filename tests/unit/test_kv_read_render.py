"""A KV v2 read's data block with each version's metadata encoded once
(services/secrets/engines/kv/read_render.py): the same JSON as building it per read."""

from __future__ import annotations

import time

import msgspec

from services.secrets.engines.kv.read_render import ReadRenderer
from services.secrets.engines.kv.records import KeyRecord, VersionRecord
from services.secrets.engines.kv.versions import version_metadata


def built(key: KeyRecord, number: int, raw: bytes) -> bytes:
    meta = version_metadata(key, number, key.versions[number])
    return msgspec.json.encode({"data": msgspec.Raw(raw), "metadata": meta})


def record(**kw: object) -> KeyRecord:
    now = time.time_ns()
    versions = {1: VersionRecord(created=now - 10**9), 2: VersionRecord(created=now, deleted=now)}
    return KeyRecord(created=now, updated=now, current=2, versions=versions, **kw)  # type: ignore[arg-type]


def test_same_json_as_built_per_read() -> None:
    r = ReadRenderer()
    for key in (record(), record(custom={"owner": 'a"b'})):
        for number, raw in ((1, b'{"a":1}'), (2, b'{"b":[1,2],"c":"\\u00e9"}')):
            for _ in range(2):  # the miss, then the hit
                assert msgspec.json.encode(r.render(key, number, raw)) == built(key, number, raw)


def test_each_record_and_version_has_its_own_metadata() -> None:
    r = ReadRenderer()
    old, new = record(), record(custom={"rev": "2"})
    assert msgspec.json.encode(r.render(old, 1, b"{}")) == built(old, 1, b"{}")
    # A later write is a new record object: its metadata, not the cached one of the old record.
    assert msgspec.json.encode(r.render(new, 1, b"{}")) == built(new, 1, b"{}")
    assert msgspec.json.encode(r.render(new, 2, b"{}")) == built(new, 2, b"{}")
    # The data is spliced per read, never cached.
    assert msgspec.json.decode(msgspec.json.encode(r.render(new, 2, b'{"x":3}')))["data"] == {
        "x": 3
    }


def test_large_records_are_answered_but_not_held() -> None:
    r = ReadRenderer()
    big = record()
    big.versions[1].data = b'"' + b"x" * 20_000 + b'"'
    assert msgspec.json.encode(r.render(big, 1, b"{}")) == built(big, 1, b"{}")
    assert r._metadata == {}
    small = record()
    r.render(small, 1, b"{}")
    assert list(r._metadata) == [(id(small), 1)]
