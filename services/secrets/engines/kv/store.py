"""KV's storage layout under a mount's barrier view, and the check-and-set loop every v2 change
goes through.

    v1/<path>    a v1 entry (JSON)
    meta/<path>  a v2 KeyRecord: metadata, versions, and the data of small versions (or a copy
                 of the latest data)
    blob/<id>    the data (JSON) of a version too large to keep in the record; ids are random,
                 so a writer that loses a race deletes its own blob without touching anyone
                 else's
    config       the v2 mount config
    upgraded     present once v1 entries have been moved to v2

A v2 write of small data is one record write; a larger one first creates its blob, then swaps
the key record by CAS on its revision (`create` for a new key), so a record never names a blob
that is not stored. Writers of one key in one replica are queued and written together
(group_commit); a conflict with another replica re-reads and retries, so no version is lost.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

import structlog

from services.secrets.core.barrier import BarrierView, CasConflict
from services.secrets.engines.kv import records
from services.secrets.engines.kv.group_commit import (
    MAX_ATTEMPTS,
    UNSET,
    Change,
    Got,
    GroupCommit,
    Plan,
    Unset,
    backoff,
    busy,
)
from services.secrets.engines.kv.read_batch import ReadBatch
from services.secrets.engines.kv.records import Config, KeyRecord
from services.secrets.framework.request import Request

__all__ = ["UNSET", "Change", "Got", "KVStore", "Plan", "Unset"]

log = structlog.get_logger("kv")

V1 = "v1/"
META = "meta/"
BLOB = "blob/"
CONFIG = "config"
UPGRADED = "upgraded"

# Latest data above this size is not copied into the key record (reads then take two gets).
INLINE_MAX = 128 * 1024


class KVStore:
    def __init__(self, view: BarrierView) -> None:
        self.view = view
        self.commits = GroupCommit(self.get_key, self._write_key, self.delete_blobs)
        self._read_memo: dict[str, tuple[bytes, KeyRecord]] = {}
        self._reads = ReadBatch(self._read_key, self._peek_key)

    # ---- records ------------------------------------------------------------------------
    async def get_key(self, path: str) -> Got:
        got = await self.view.get_entry(META + path)
        return None if got is None else (records.decode_key(got[0]), got[1])

    async def read_key(self, path: str) -> KeyRecord | None:
        """The key record for a read, decoded once per stored record; reads of one key in the
        same loop turn share one get (read_batch). Shared between reads, so only for
        answering: a change starts from `get_key`'s own copy."""
        return await self._reads.get(path)

    def _peek_key(self, path: str) -> KeyRecord | object | None:
        return self.view.peek_decoded(META + path, self._read_memo)

    async def _read_key(self, path: str) -> KeyRecord | None:
        return await self.view.get_decoded(META + path, records.decode_key, self._read_memo)

    async def get_config(self) -> Config:
        raw = await self.view.get(CONFIG)
        return Config() if raw is None else records.decode_config(raw)

    async def get_config_entry(self) -> tuple[Config, int]:
        got = await self.view.get_entry(CONFIG)
        return (Config(), 0) if got is None else (records.decode_config(got[0]), got[1])

    async def put_config(self, config: Config, revision: int) -> None:
        raw = records.encode(config)
        if revision:
            await self.view.update(CONFIG, raw, revision)
        else:
            await self.view.create(CONFIG, raw)

    async def list_keys(self, folder: str) -> list[str]:
        return await self.view.list(META + folder)

    # ---- blobs --------------------------------------------------------------------------
    async def create_blob(self, data: bytes) -> str:
        blob = secrets.token_hex(16)
        await self.view.create(BLOB + blob, data)
        return blob

    async def get_blob(self, blob: str) -> bytes | None:
        return await self.view.get(BLOB + blob) if blob else None

    async def version_data(self, key: KeyRecord, number: int) -> bytes | None:
        """A version's JSON data: from the record when it is kept there, else from its blob;
        None once destroyed or pruned."""
        entry = key.versions.get(number)
        if entry is None:
            return None
        if entry.data is not None:
            return entry.data
        if number == key.current and key.latest is not None:
            return key.latest
        return await self.get_blob(entry.blob)

    async def delete_blobs(self, blobs: list[str]) -> None:
        """Best effort: a blob left behind is unreferenced ciphertext, never readable data."""
        if not blobs:
            return
        results = await asyncio.gather(
            *(self.view.delete(BLOB + b) for b in blobs), return_exceptions=True
        )
        failed = sum(isinstance(r, BaseException) for r in results)
        if failed:
            log.warning("could not delete old kv versions", count=failed)

    # ---- check-and-set ------------------------------------------------------------------
    async def mutate(self, path: str, change: Change, got: Got | Unset = UNSET) -> Any:
        """Apply `change` to the key's current record and write the result by CAS, together
        with the changes other requests of this replica queued for the same key (group_commit).
        `got` is a record the caller already read (possibly stale: the CAS catches that)."""
        return await self.commits.submit(path, change, got)

    async def _write_key(self, path: str, raw: bytes, revision: int) -> int:
        if revision:
            return await self.view.update(META + path, raw, revision)
        return await self.view.create(META + path, raw)

    async def delete_key(self, path: str, got: Got | Unset = UNSET) -> None:
        """Remove a key record and all its versions. The record goes first, by CAS, so a write
        that raced in is either seen here (its blob deleted too) or lands after (a new key)."""
        for attempt in range(MAX_ATTEMPTS):
            if isinstance(got, Unset):
                got = await self.get_key(path)
            if got is None:
                return
            record, revision = got
            try:
                await cas_delete(self.view, META + path, revision)
            except CasConflict:
                got = UNSET
                await backoff(attempt)
                continue
            self.commits.forget(path)
            await self.delete_blobs([v.blob for v in record.versions.values() if v.blob])
            return
        raise busy()


async def cas_delete(view: BarrierView, path: str, revision: int) -> None:
    """Delete `path` only if it is still at `revision`."""
    await view.delete(path, revision)


# ---- a record read by the existence check, handed to the handler of the same request ------
_PREFETCH = "kv_prefetched"


def remember(req: Request, path: str, got: Got) -> None:
    req.scratch[_PREFETCH] = (path, got)


def recall(req: Request, path: str) -> Got | Unset:
    saved = req.scratch.pop(_PREFETCH, None)
    if saved is None or saved[0] != path:
        return UNSET
    return saved[1]


async def key_exists(store: KVStore, req: Request, path: str) -> bool:
    """The create/update decision of a write; the record read here saves the handler a get."""
    got = await store.get_key(path)
    remember(req, path, got)
    return got is not None
