"""Tuning a KV mount from version 1 to 2 keeps its data: each v1 entry becomes version 1 of a
v2 key. Safe to run on several replicas at once: a key is created only if absent, and the v1
entry is removed only after its v2 key exists."""

from __future__ import annotations

import asyncio

import structlog

from services.secrets.core.barrier import CasConflict
from services.secrets.engines.kv import records
from services.secrets.engines.kv.records import Config, KeyRecord
from services.secrets.engines.kv.store import INLINE_MAX, META, UPGRADED, V1, KVStore
from services.secrets.engines.kv.timestamps import now_ns
from services.secrets.engines.kv.versions import add_version

log = structlog.get_logger("kv")

# Entries moved at once; bounds the load one upgrade puts on JetStream.
BATCH = 32


async def upgrade(store: KVStore) -> int:
    """Move every v1 entry to v2 unless done already; returns how many were moved. One storage
    get when there is nothing to do (this runs whenever the mount is (re)loaded)."""
    view = store.view
    if await view.get(UPGRADED) is not None:
        return 0
    keys = await view.list_all(V1)
    moved = 0
    for start in range(0, len(keys), BATCH):
        results = await asyncio.gather(*(_move(store, k) for k in keys[start : start + BATCH]))
        moved += sum(results)
    await view.put(UPGRADED, b"1")
    if moved:
        log.info("kv mount upgraded to version 2", keys=moved)
    return moved


async def _move(store: KVStore, path: str) -> bool:
    view = store.view
    raw = await view.get(V1 + path)
    if raw is None:
        return False  # another replica moved it
    blob = await store.create_blob(raw)
    now = now_ns()
    key = KeyRecord(created=now, updated=now)
    add_version(key, Config(), now, blob, raw if len(raw) <= INLINE_MAX else None)
    moved = True
    try:
        await view.create(META + path, records.encode(key))
    except CasConflict:
        # Already a v2 key (another replica, or a write after the upgrade): it wins.
        await store.delete_blobs([blob])
        moved = False
    await view.delete(V1 + path)
    return moved
