"""The data block of a KV v2 read as JSON, with each version's metadata encoded once.

A read answers `{"data": <stored JSON>, "metadata": {...}}`. The metadata of a version is a
function of its key record alone, and a record read for answering is one shared, never-changed
object per stored value (KVStore.read_key), so its metadata JSON is kept per record object and
version number. The data itself is not kept here: it is spliced in per read.
"""

from __future__ import annotations

import msgspec

from services.secrets.engines.kv.records import KeyRecord
from services.secrets.engines.kv.versions import version_metadata

# As the record memo (core/barrier.py): a few hundred small records. A record with more inline
# data than that is not held (it is not memoised either, so each read is a new object anyway).
MAX_ENTRIES = 512
MAX_RECORD_DATA = 16 * 1024
_enc = msgspec.json.Encoder()


class ReadRenderer:
    def __init__(self) -> None:
        # id(record), version -> (record, metadata JSON); holding the record keeps its id
        # from being reused while it is cached.
        self._metadata: dict[tuple[int, int], tuple[KeyRecord, bytes]] = {}

    def render(self, key: KeyRecord, number: int, raw: bytes) -> msgspec.Raw:
        slot = (id(key), number)
        hit = self._metadata.get(slot)
        if hit is not None and hit[0] is key:
            meta = hit[1]
        else:
            meta = _enc.encode(version_metadata(key, number, key.versions[number]))
            if _inline_size(key) <= MAX_RECORD_DATA:
                if len(self._metadata) >= MAX_ENTRIES:
                    self._metadata.clear()
                self._metadata[slot] = (key, meta)
        return msgspec.Raw(b'{"data":%b,"metadata":%b}' % (raw, meta))


def _inline_size(key: KeyRecord) -> int:
    return len(key.latest or b"") + sum(len(v.data or b"") for v in key.versions.values())
