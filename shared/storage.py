"""The Storage interface (get, put, CAS, delete, list, watch) and its JetStream KV
implementation. Values are opaque bytes: the secrets barrier encrypts them before they get here.

Keys are slash-separated paths of any characters. NATS KV keys allow only `[-/_=.A-Za-z0-9]`
and use `.` as the token separator, so each path segment is escaped (`=XX` per byte outside
`[-_A-Za-z0-9]`, `=` for an empty segment) and segments are joined with `.`. Listing a prefix is
then a server-side subject filter, not a scan.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import re
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol, cast

import msgspec
import nats.errors
import nats.js.errors
import structlog
from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    KeyValueConfig,
    StorageType,
)
from nats.js.kv import KeyValue

from shared import nats_request, storage_feed
from shared.nats_inline import InlineClient
from shared.storage_cache import MISS, StorageCache

log = structlog.get_logger("storage")
_SAFE = re.compile(rb"[-_A-Za-z0-9]")
# Most paths need no escaping at all: a quick check saves the per-byte walk on the hot path.
_PLAIN = re.compile(r"[-_A-Za-z0-9]+(?:/[-_A-Za-z0-9]+)*")


class _LastBySubject(msgspec.Struct):
    last_by_subj: str


class _StoredMsg(msgspec.Struct):
    seq: int = 0
    data: str = ""
    hdrs: str = ""


class _ApiError(msgspec.Struct):
    code: int = 0
    err_code: int = 0
    description: str = ""


class _GetReply(msgspec.Struct):
    message: _StoredMsg | None = None
    error: _ApiError | None = None


class _PubAck(msgspec.Struct):
    seq: int = 0
    error: _ApiError | None = None


_get_request = msgspec.json.Encoder()
_get_reply = msgspec.json.Decoder(_GetReply)
_pub_ack = msgspec.json.Decoder(_PubAck)
# JetStream's "wrong last sequence" error codes: a CAS write lost.
_WRONG_LAST = (10071, 10164)
_EXPECTED_LAST = "Nats-Expected-Last-Subject-Sequence"
_KV_DEL = {"KV-Operation": "DEL"}
_KV_PURGE = {"KV-Operation": "PURGE", "Nats-Rollup": "sub"}
# A delete or purge marker is the key's last message once it is gone.
_DELETED = re.compile(rb"KV-Operation:\s*(DEL|PURGE)")


class CasConflict(Exception):
    """The key changed (or exists, or is gone) since the revision the writer saw."""


class KeyTooLong(ValueError):
    """The escaped key would not fit in a NATS subject (the server drops such connections)."""


# A client remembers the sequence of its last write of this many keys (up to twice as many):
# an API read of one of them must not come back without that write (`JetStreamStorage.get`).
RECENT_WRITES = 32768
# Seconds between asks of such a read while only stale copies answer.
REASK = 0.25

# NATS' control line is 4 KiB by default and carries the subject, a reply inbox and more.
MAX_KEY_LENGTH = 2048


@dataclass(frozen=True, slots=True)
class Entry:
    key: str
    value: bytes
    revision: int


@dataclass(frozen=True, slots=True)
class Change:
    """One change seen by a watcher; `value` is None for a delete."""

    key: str
    value: bytes | None
    revision: int


class Storage(Protocol):
    async def get(self, key: str) -> Entry | None: ...
    def peek(self, key: str) -> Entry | object | None: ...
    async def put(self, key: str, value: bytes) -> int: ...
    async def create(self, key: str, value: bytes) -> int: ...
    async def update(self, key: str, value: bytes, revision: int) -> int: ...
    async def delete(self, key: str, revision: int | None = None) -> None: ...
    async def list(self, prefix: str) -> list[str]: ...
    def watch(self, prefix: str) -> AsyncIterator[Change]: ...
    async def last_revision(self) -> int: ...


def encode_key(path: str) -> str:
    if len(path) > MAX_KEY_LENGTH:
        raise KeyTooLong(f"the path is too long (over {MAX_KEY_LENGTH} characters)")
    if _PLAIN.fullmatch(path):
        return path.replace("/", ".")
    out = []
    for seg in path.split("/"):
        if not seg:
            out.append("=")
            continue
        raw = seg.encode()
        out.append("".join(chr(b) if _SAFE.match(bytes([b])) else f"={b:02X}" for b in raw))
    key = ".".join(out)
    if len(key) > MAX_KEY_LENGTH:
        raise KeyTooLong(f"the path is too long once escaped ({len(key)} > {MAX_KEY_LENGTH})")
    return key


def decode_key(key: str) -> str:
    if "=" not in key:  # nothing escaped (most keys): skip the per-character walk
        return key.replace(".", "/")
    segs = []
    for seg in key.split("."):
        if seg == "=":
            segs.append("")
            continue
        buf = bytearray()
        i = 0
        while i < len(seg):
            if seg[i] == "=":
                buf.append(int(seg[i + 1 : i + 3], 16))
                i += 3
            else:
                buf.append(ord(seg[i]))
                i += 1
        segs.append(buf.decode())
    return "/".join(segs)


def _decode_get(key: str, data: bytes) -> tuple[int, Entry | None]:
    """An API read's answer: the sequence of the key's last message (0: none) and the entry
    (None: absent, or a delete/purge marker)."""
    reply = _get_reply.decode(data)
    if reply.error is not None:
        if reply.error.code == 404:
            return 0, None
        raise nats.js.errors.APIError(code=reply.error.code, description=reply.error.description)
    stored = reply.message
    if stored is None:
        return 0, None
    if stored.hdrs and _DELETED.search(base64.b64decode(stored.hdrs)):
        return stored.seq, None
    return stored.seq, Entry(key, base64.b64decode(stored.data) if stored.data else b"", stored.seq)


def _filter_for(prefix: str) -> str:
    """The subject filter for every key whose path starts with `prefix` (a folder, ending in /,
    or empty for all)."""
    if not prefix:
        return ">"
    if not prefix.endswith("/"):
        raise ValueError("list and watch prefixes must end in '/'")
    return encode_key(prefix[:-1]) + ".>"


async def _direct_reads(js: JetStreamContext, stream: str) -> bool:
    """Whether reads may use Direct Get, and if so turn it on for the stream. A direct get is
    answered from the stream's store without the JetStream API's request handling and JSON (most
    of nats-server's CPU for a read). With one replica the server that answers is the one that
    acknowledged every write, so a read after an acknowledged write still sees it; with more,
    a follower may answer behind the leader, so those streams keep reading through the API."""
    info = await js.stream_info(stream)
    if info.config.num_replicas != 1:
        return False
    if not info.config.allow_direct:
        info.config.allow_direct = True
        await js.update_stream(info.config)
    return True


class JetStreamStorage:
    """Storage on one JetStream KV bucket. Its stream is the write-ahead log: the revision of a
    write is the stream sequence, which DR replication ships as the WAL index."""

    def __init__(
        self,
        kv: KeyValue,
        js: JetStreamContext,
        bucket: str,
        timeout: float = 5.0,
        *,
        direct: bool = False,
    ) -> None:
        self.kv = kv
        self.js = js
        self.bucket = bucket
        self.timeout = timeout
        self.direct = direct  # reads by Direct Get (see _direct_reads)
        # Key -> sequence of this client's last acknowledged write of it, in two generations.
        self._wrote: dict[str, int] = {}
        self._wrote_before: dict[str, int] = {}
        # Reads answered from memory, kept exact by `feed` (shared/storage_feed.py); None: off.
        self.cache: StorageCache | None = None
        self.feed: storage_feed.CacheFeed | None = None

    @classmethod
    async def open(
        cls,
        js: JetStreamContext,
        bucket: str,
        *,
        replicas: int = 1,
        history: int = 1,
        cache_feed: str = "",
    ) -> JetStreamStorage:
        """`cache_feed`: keep a read cache, invalidated by the stream's republish of every
        write to `<cache_feed>.<key>`, where that can be exact (one server, one replica, a
        client that delivers inline); empty: none."""
        nc = js._nc
        if cache_feed and not (
            replicas == 1 and isinstance(nc, InlineClient) and storage_feed.standalone(nc)
        ):
            cache_feed = ""
        republish = storage_feed.republish_for(bucket, cache_feed) if cache_feed else None
        try:
            kv = await js.key_value(bucket)
        except nats.js.errors.BucketNotFoundError:
            config = KeyValueConfig(
                bucket=bucket,
                history=history,
                replicas=replicas,
                storage=StorageType.FILE,
                republish=republish,
                direct=True if republish else None,
            )
            try:
                kv = await js.create_key_value(config)
            except nats.js.errors.BadRequestError:
                kv = await js.key_value(bucket)  # another replica created it first
        stream = f"KV_{bucket}"
        if republish is not None:
            await storage_feed.prepare_stream(js, stream, republish)
        storage = cls(kv, js, bucket, direct=await _direct_reads(js, stream))
        if republish is not None and storage.direct:
            assert isinstance(nc, InlineClient)
            storage.feed = feed = storage_feed.CacheFeed(nc, js, bucket, stream, cache_feed)
            storage.cache = feed.cache
            await feed.start()
        return storage

    @property
    def stream(self) -> str:
        return f"KV_{self.bucket}"

    def peek(self, key: str) -> Entry | object | None:
        """What `get` would answer, if the cache can say it now without a wait; else MISS."""
        cache = self.cache
        return MISS if cache is None else cache.lookup(encode_key(key))

    async def get(self, key: str) -> Entry | None:
        """The key's entry: from the cache when it can answer, else from the stream (and kept
        in the cache if no write of the key landed meanwhile)."""
        ekey = encode_key(key)
        cache = self.cache
        if cache is None:
            return await self._get(key, ekey)
        hit = cache.lookup(ekey)
        if hit is not MISS:
            return cast("Entry | None", hit)
        fill = cache.begin(ekey)
        if fill is None:
            return await self._get(key, ekey)
        try:
            entry = await self._get(key, ekey)
        except BaseException:
            cache.end(fill, None, keep=False)
            raise
        cache.end(fill, entry)
        return entry

    async def _get(self, key: str, ekey: str) -> Entry | None:
        """The last message of the key's subject, read from the stream leader. This is the hot
        path of every secrets read: a Direct Get where the stream allows it (`_direct_reads`),
        else one JetStream API request decoded with msgspec, without nats-py's generic JSON and
        MIME header parsing."""
        subject = f"$KV.{self.bucket}.{ekey}"
        if self.direct:
            try:
                return await self._get_direct(key, subject)
            except nats.errors.NoRespondersError:
                pass  # the direct responder is not up yet (just enabled, a restart): ask the API
        request = _get_request.encode(_LastBySubject(last_by_subj=subject))
        try:
            msg = await nats_request.request(
                self.js._nc,  # the context's own connection
                f"$JS.API.STREAM.MSG.GET.{self.stream}",
                request,
                timeout=self.timeout,
            )
        except nats.errors.NoRespondersError:
            raise nats.js.errors.ServiceUnavailableError() from None
        seq, entry = _decode_get(key, msg.data)
        wrote = self._wrote.get(key) or self._wrote_before.get(key, 0)
        if seq < wrote:
            # Rare (a partition that just healed), and worth knowing: a server held itself the
            # leader without being it. The key stays out of the log.
            log.warning("a stale copy answered a read; asking again", stream=self.stream)
            return await self._get_current(key, request, wrote)
        return entry

    async def _get_current(self, key: str, request: bytes, wrote: int) -> Entry | None:
        """Every server gets an API read, and one cut off from the others (a partition) can
        hold itself the stream leader for a while after it is back, answering from a copy
        without the writes its successor acknowledged meanwhile. The first answer lacked this
        client's write `wrote` of the key: ask again (every REASK seconds, as a new leader may
        still be being elected), and take the first answer that has it."""
        nc = self.js._nc
        sub = await nc.subscribe(nc.new_inbox())
        try:
            give_up = time.monotonic() + self.timeout
            ask_at = 0.0
            while (now := time.monotonic()) < give_up:
                if now >= ask_at:
                    subject = f"$JS.API.STREAM.MSG.GET.{self.stream}"
                    await nc.publish(subject, request, reply=sub.subject)
                    ask_at = now + REASK
                try:
                    msg = await sub.next_msg(timeout=min(ask_at, give_up) - now)
                except nats.errors.TimeoutError:
                    continue
                if not msg.data:
                    continue  # a status (no responders yet): the leader may still answer
                seq, entry = _decode_get(key, msg.data)
                if seq >= wrote:
                    return entry
        finally:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()
        raise nats.js.errors.ServiceUnavailableError(
            description="no current copy of the stream answered"
        )

    async def _get_direct(self, key: str, subject: str) -> Entry | None:
        """The last message of the key's subject by Direct Get: the stored message as it is,
        its sequence in a header, no JSON or base64 on either side."""
        msg = await nats_request.request(
            self.js._nc,
            f"$JS.API.DIRECT.GET.{self.stream}.{subject}",
            b"",
            timeout=self.timeout,
        )
        headers = msg.headers or {}
        status = headers.get("Status")
        if status == "404":
            return None
        if status:
            raise nats.js.errors.APIError(
                code=int(status), description=headers.get("Description", "")
            )
        if headers.get("KV-Operation") in ("DEL", "PURGE"):
            return None
        return Entry(key, msg.data, int(headers["Nats-Sequence"]))

    async def _publish(
        self,
        key: str,
        value: bytes,
        last: int | None = None,
        marker: dict[str, str] | None = None,
    ) -> int:
        """One write, answered once JetStream has stored it (fsynced, with sync_interval:
        always); with `last`, only if the key's last revision is that (0: absent); `marker`:
        the headers of a delete or purge marker. What nats-py's KeyValue sends, without its
        generic request path, JSON and dataclass on every acknowledgement."""
        headers = marker
        if last is not None:
            headers = {**(marker or {}), _EXPECTED_LAST: str(last)}
        try:
            msg = await nats_request.request(
                self.js._nc,
                f"$KV.{self.bucket}.{encode_key(key)}",
                value,
                timeout=self.timeout,
                headers=headers,
            )
        except nats.errors.NoRespondersError:
            raise nats.js.errors.NoStreamResponseError() from None
        ack = _pub_ack.decode(msg.data)
        if ack.error is not None:
            if ack.error.err_code in _WRONG_LAST:
                raise CasConflict(key)
            nats.js.errors.APIError.from_error(msgspec.structs.asdict(ack.error))  # raises
        self._remember(key, ack.seq)
        return ack.seq

    def _remember(self, key: str, seq: int) -> None:
        wrote = self._wrote
        wrote[key] = seq
        if len(wrote) >= RECENT_WRITES:
            self._wrote_before, self._wrote = wrote, {}

    async def put(self, key: str, value: bytes) -> int:
        return await self._publish(key, value)

    async def create(self, key: str, value: bytes) -> int:
        try:
            return await self._publish(key, value, 0)
        except CasConflict:
            pass
        # The key exists, or its last message is a delete marker, which nats-py writes over.
        try:
            seq = await self.kv.create(encode_key(key), value, validate_keys=False)
        except nats.js.errors.KeyWrongLastSequenceError as exc:
            raise CasConflict(key) from exc
        self._remember(key, seq)
        return seq

    async def update(self, key: str, value: bytes, revision: int) -> int:
        return await self._publish(key, value, revision)

    async def delete(self, key: str, revision: int | None = None) -> None:
        # Purge (not a delete marker) so that history does not keep old ciphertexts around.
        # Written like any other write: a later read must not find the key still there.
        if revision is None:
            await self._publish(key, b"", marker=_KV_PURGE)
        else:
            await self._publish(key, b"", revision or None, _KV_DEL)

    async def list(self, prefix: str) -> list[str]:
        """Full paths of the keys under `prefix`, sorted.

        An ephemeral pull consumer (last message per subject, headers only) gives an exact
        count up front and each message's remaining count, so the end is known without the
        race nats-py's watcher has between "nothing pending" and messages already delivered.
        """
        pre = f"$KV.{self.bucket}."
        config = ConsumerConfig(
            name=uuid.uuid4().hex,
            filter_subject=pre + _filter_for(prefix),
            deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
            ack_policy=AckPolicy.NONE,
            headers_only=True,
            inactive_threshold=30.0,
            mem_storage=True,
            num_replicas=1,
        )
        info = await self.js.add_consumer(self.stream, config=config)
        keys: list[str] = []
        try:
            if info.num_pending == 0:
                return keys
            sub = await self.js.pull_subscribe_bind(stream=self.stream, name=config.name)
            try:
                done = False
                while not done:
                    for msg in await sub.fetch(batch=1024, timeout=5):
                        op = msg.headers.get("KV-Operation") if msg.headers else None
                        if op not in ("DEL", "PURGE"):
                            keys.append(decode_key(msg.subject[len(pre) :]))
                        if msg.metadata.num_pending == 0:
                            done = True
            finally:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()
        finally:
            with contextlib.suppress(Exception):
                await self.js.delete_consumer(self.stream, config.name)
        keys.sort()
        return keys

    async def watch(self, prefix: str) -> AsyncIterator[Change]:
        """Current values under `prefix`, then every change, in revision order. Yields a
        Change with key "" once the current values have all been delivered."""
        watcher = await self.kv.watch(_filter_for(prefix), inactive_threshold=30)
        try:
            async for entry in watcher:
                if entry is None:
                    yield Change("", None, 0)
                    continue
                deleted = entry.operation is not None
                yield Change(
                    decode_key(entry.key),
                    None if deleted else entry.value,
                    entry.revision or 0,
                )
        finally:
            with contextlib.suppress(Exception):
                await watcher.stop()

    async def last_revision(self) -> int:
        info = await self.js.stream_info(self.stream)
        return info.state.last_seq


class MemoryStorage:
    """Storage in a dict, with the same semantics, for unit tests of pure logic."""

    def __init__(self) -> None:
        self.data: dict[str, Entry] = {}
        self.rev = 0
        self._watchers: list[tuple[str, asyncio.Queue[Change]]] = []

    def _bump(self, key: str, value: bytes | None) -> int:
        self.rev += 1
        if value is None:
            self.data.pop(key, None)
        else:
            self.data[key] = Entry(key, value, self.rev)
        for prefix, q in self._watchers:
            if key.startswith(prefix):
                q.put_nowait(Change(key, value, self.rev))
        return self.rev

    def peek(self, key: str) -> Entry | object | None:
        return self.data.get(key)

    async def get(self, key: str) -> Entry | None:
        return self.data.get(key)

    async def put(self, key: str, value: bytes) -> int:
        return self._bump(key, value)

    async def create(self, key: str, value: bytes) -> int:
        if key in self.data:
            raise CasConflict(key)
        return self._bump(key, value)

    async def update(self, key: str, value: bytes, revision: int) -> int:
        cur = self.data.get(key)
        if (cur.revision if cur else 0) != revision:
            raise CasConflict(key)
        return self._bump(key, value)

    async def delete(self, key: str, revision: int | None = None) -> None:
        cur = self.data.get(key)
        if revision is not None and (cur.revision if cur else 0) != revision:
            raise CasConflict(key)
        if cur is not None:
            self._bump(key, None)

    async def list(self, prefix: str) -> list[str]:
        return sorted(k for k in self.data if k.startswith(prefix))

    async def watch(self, prefix: str) -> AsyncIterator[Change]:
        q: asyncio.Queue[Change] = asyncio.Queue()
        for k, e in sorted(self.data.items(), key=lambda kv: kv[1].revision):
            if k.startswith(prefix):
                q.put_nowait(Change(k, e.value, e.revision))
        q.put_nowait(Change("", None, 0))
        item = (prefix, q)
        self._watchers.append(item)
        try:
            while True:
                yield await q.get()
        finally:
            self._watchers.remove(item)

    async def last_revision(self) -> int:
        return self.rev
