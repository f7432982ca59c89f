"""Large sealed blobs (state files) in a JetStream object store: the replicated log holds
only their metadata. Every blob is already encrypted by the caller (sealing.py)."""

from __future__ import annotations

import asyncio
import contextlib

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import ObjectStoreConfig, StorageType
from nats.js.object_store import ObjectStore

from services.workspace.jsonapi import ApiError

# Seconds a blob's read may take: state files of tens of MB on a loaded machine, with room.
READ_SECONDS = 60.0


class BlobStore:
    def __init__(self, js: JetStreamContext, bucket: str, replicas: int) -> None:
        self.js = js
        self.bucket = bucket
        self.replicas = replicas
        self._store: ObjectStore | None = None

    async def _open(self) -> ObjectStore:
        if self._store is not None:
            return self._store
        try:
            self._store = await self.js.object_store(self.bucket)
        except nats.js.errors.NotFoundError:
            try:
                self._store = await self.js.create_object_store(
                    self.bucket,
                    config=ObjectStoreConfig(storage=StorageType.FILE, replicas=self.replicas),
                )
            except nats.js.errors.BadRequestError:  # a peer created it first
                self._store = await self.js.object_store(self.bucket)
        return self._store

    async def put(self, name: str, data: bytes) -> None:
        try:
            await (await self._open()).put(name, data)
        except (nats.errors.Error, TimeoutError):
            raise ApiError(503, "the state store is unavailable; retry") from None

    async def get(self, name: str) -> bytes | None:
        try:
            store = await self._open()
            # nats-py reads the object's info, then waits for its chunks without end: for an
            # object deleted in between (a run's plan file, a deleted workspace's state) they
            # never come. Bounded, and a blob gone by then is a miss, not an outage.
            try:
                res = await asyncio.wait_for(store.get(name), READ_SECONDS)
            except TimeoutError:
                await store.get_info(name)  # ObjectNotFoundError when it was deleted
                raise
        except nats.js.errors.ObjectNotFoundError:
            return None
        except (nats.errors.Error, TimeoutError):
            raise ApiError(503, "the state store is unavailable; retry") from None
        return res.data or b""

    async def delete(self, name: str) -> None:
        with contextlib.suppress(nats.js.errors.ObjectNotFoundError, nats.errors.Error):
            await (await self._open()).delete(name)
