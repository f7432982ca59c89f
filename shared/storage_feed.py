"""Keeps a replica's StorageCache (shared/storage_cache.py) exact, from the KV stream itself.

Why it is exact, with ONE nats-server hosting the stream (docs/performance.md, sixth round):
- The stream republishes every message it stores (RePublish, headers only) to `<feed>.<key>`,
  and this replica subscribes to that on the connection its requests and storage reads use,
  delivered inline in the parser (shared/nats_inline.py): an invalidation is applied before
  any message that arrived after it on the connection is dispatched.
- nats-server sends a stored message's republish and then its acknowledgement through the
  stream's one send queue, fanning each out to every subscriber before the next: the
  republish is queued to this replica's connection before the writer can know its write is
  acknowledged. Whatever the writer (or anyone it told) sends afterwards reaches this replica
  behind the republish (each connection is read in order, and its messages fanned out in
  order), so a request that starts after an acknowledged write finds its key invalidated.
- The republish is sent once the message is stored: a read from storage that starts after
  it sees the write; one in flight across it keeps nothing (StorageCache's fill check).
  Writes the stream refuses (a lost CAS) are stored nowhere and republished nowhere.
- Operations that change the stream without storing a message (purge, message delete, a
  config update, delete, restore) are seen as copies of their JetStream API requests, sent on
  subjects this replica also subscribes to. Their end is not visible from here, so the cache
  stays off from the first one on.
With several servers (a cluster), a republish and a later request may take different routes:
no order between them, so no cache (`standalone`). The feed also turns the cache off for a
stream whose messages can vanish without a message (age, size or count limits, message TTLs)
or that takes messages from elsewhere (mirror, sources), and for good at the first write
that carries a message TTL (KV streams allow them; nothing announces the expiry).
"""

from __future__ import annotations

import asyncio
from typing import Any

import nats.errors
import structlog
from nats.js import JetStreamContext
from nats.js.api import RePublish, StreamConfig

from shared.nats_inline import InlineClient
from shared.storage_cache import StorageCache

log = structlog.get_logger("storage.cache")

# A key no encode_key result can be ("=" is followed by two hex digits or ends a segment):
# the feed sends it to itself to prove its subscription is in place.
PROBE = "=probe"
# Seconds between checks while the connection is down or JetStream does not answer.
RETRY = 0.5
# JetStream API operations on the stream that change nothing stored.
_READ_ONLY_OPS = ("INFO", "SNAPSHOT")


def standalone(nc: Any) -> bool:
    """Whether the connected server is alone: no cluster name, no other servers to route to."""
    info = nc._server_info
    return not info.get("cluster") and not info.get("connect_urls")


def republish_for(bucket: str, feed: str) -> RePublish:
    return RePublish(src=f"$KV.{bucket}.>", dest=f"{feed}.>", headers_only=True)


def _unfit(config: StreamConfig, republish: RePublish) -> str:
    """Why the stream cannot back an exact cache ("": it can)."""
    rp = config.republish
    if rp is None or (rp.src, rp.dest, bool(rp.headers_only)) != (
        republish.src,
        republish.dest,
        True,
    ):
        return "the stream does not republish its writes to the feed"
    if config.num_replicas not in (None, 1):
        return "the stream is replicated"
    if not config.allow_direct:
        return "the stream does not allow direct reads"
    if config.max_age or (config.max_msgs or 0) > 0 or (config.max_bytes or 0) > 0:
        return "the stream drops messages by age, count or size"
    if config.mirror is not None or config.sources:
        return "the stream takes messages from other streams"
    return ""


async def prepare_stream(js: JetStreamContext, stream: str, republish: RePublish) -> None:
    """Make the stream republish its writes to the feed (once per stream: an update seen by
    a running replica turns its cache off)."""
    info = await js.stream_info(stream)
    rp = info.config.republish
    if rp is not None and (rp.src, rp.dest, rp.headers_only) == (
        republish.src,
        republish.dest,
        True,
    ):
        return
    info.config.republish = republish
    await js.update_stream(info.config)


class CacheFeed:
    def __init__(
        self, nc: InlineClient, js: JetStreamContext, bucket: str, stream: str, feed: str
    ) -> None:
        self.nc = nc
        self.js = js
        self.stream = stream
        self.feed = feed
        self.republish = republish_for(bucket, feed)
        self.cache = StorageCache(self._link, self._lost)
        self._skip = len(feed) + 1
        self._halted = False
        self._checking: asyncio.Task[None] | None = None
        self._saw_feed = False
        self._saw_api = False

    def _link(self) -> int:
        """Changes on every reconnect; -1 while disconnected."""
        nc = self.nc
        return nc.stats["reconnects"] if nc.is_connected else -1

    async def start(self) -> None:
        nc = self.nc
        sub = await nc.subscribe(f"{self.feed}.>")
        nc.deliver_raw(sub, self._on_change)
        for subject in (
            f"$JS.API.STREAM.*.{self.stream}",
            f"$JS.API.STREAM.MSG.DELETE.{self.stream}",
        ):
            sub = await nc.subscribe(subject)
            nc.deliver_inline(sub, self._on_stream_op)
        await self._check()

    async def stop(self) -> None:
        self._halted = True
        self.cache.deactivate()
        if self._checking is not None:
            self._checking.cancel()

    def _on_change(self, subject: str, reply: str, data: bytes, headers: bytes | None) -> None:
        key = subject[self._skip :]
        if key == PROBE:
            self._saw_feed = True
            return
        self.cache.invalidate(key)
        if headers and b"nats-ttl:" in headers.lower():  # it will vanish later, unannounced
            self._halt("a write with a message TTL")

    def _halt(self, why: str) -> None:
        if not self._halted:
            log.warning("storage cache off", stream=self.stream, reason=why)
        self._halted = True
        self.cache.deactivate()

    def _on_stream_op(self, subject: str, reply: str, data: bytes, headers: Any) -> None:
        op = subject.split(".")[3]
        if op in _READ_ONLY_OPS:
            self._saw_api = True
            return
        self._halt(f"a direct change of the stream ({op})")

    def _lost(self) -> None:
        """The connection dropped (the cache is off already): check again once it is back."""
        if self._halted or (self._checking is not None and not self._checking.done()):
            return
        self._checking = asyncio.get_running_loop().create_task(self._check())

    async def _check(self) -> None:
        """Turn the cache on once this connection provably gets the feed and the stream-op
        copies, and the stream fits; leave it off (and say why) if it does not."""
        nc = self.nc
        while not self._halted and not nc.is_closed:
            conn = self._link()
            if conn < 0:
                await asyncio.sleep(RETRY)
                continue
            if not standalone(nc):
                log.info("storage cache off: NATS is a cluster", stream=self.stream)
                return
            self._saw_feed = self._saw_api = False
            try:
                # The info request's copy proves the stream-op subscription, the probe the feed's;
                # both are queued to this connection before the flush's PONG.
                info = await self.js.stream_info(self.stream)
                await nc.publish(f"{self.feed}.{PROBE}", b"")
                # nats-py writes a flush's PING ahead of publishes still pending: send those first.
                await nc._flush_pending(force_flush=True)
                await nc.flush()
            except (nats.errors.Error, TimeoutError):
                await asyncio.sleep(RETRY)
                continue
            reason = _unfit(info.config, self.republish)
            if not reason and not (self._saw_feed and self._saw_api):
                reason = "its subscriptions are not allowed (NATS permissions)"
            if reason:
                log.warning("storage cache off", stream=self.stream, reason=reason)
                return
            if self._halted or self._link() != conn:
                continue
            self.cache.activate(conn)
            log.info("storage cache on", stream=self.stream)
            return
