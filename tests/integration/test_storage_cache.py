"""The per-replica read cache (shared/storage_cache.py, shared/storage_feed.py) against a real
nats-server: a read that starts after a write was acknowledged, to any replica, sees it.

Replica A writes and, only once the write has returned, tells replica B (on B's own connection,
the one its cache's invalidations arrive on) to read the key: B must see that write."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Awaitable, Callable

import nats.errors
import pytest
from nats.aio.msg import Msg

from services.dev_launch import stop_process
from shared.localnet import free_port
from shared.nats_inline import InlineClient
from shared.storage import CasConflict, JetStreamStorage
from tests.conftest import start_nats

pytestmark = pytest.mark.nats


async def connect(url: str) -> InlineClient:
    nc = InlineClient()
    await nc.connect(url, reconnect_time_wait=0.1, max_reconnect_attempts=-1)
    return nc


async def replica(nc: InlineClient, bucket: str, feed: str) -> JetStreamStorage:
    st = await JetStreamStorage.open(nc.jetstream(), bucket, cache_feed=feed)
    assert st.cache is not None and st.cache.active
    return st


async def serve_reads(nc: InlineClient, subject: str, st: JetStreamStorage) -> None:
    """B's handler: read the key the request names, answer its value ("-" if absent)."""

    async def on_go(msg: Msg) -> None:
        got = await st.get(msg.data.decode())
        await msg.respond(b"-" if got is None else got.value)

    await nc.subscribe(subject, cb=on_go)
    await nc.flush()


async def wait_for(pred: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not pred():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        await asyncio.sleep(0.01)


async def test_reads_after_acknowledged_writes_see_them(nats_url: str, unique: str) -> None:
    """Put, CAS update, delete and purge of several keys at once, each followed by a read at B
    (asked directly, or relayed through a third connection), while B's own readers keep
    filling its cache with the same keys."""
    a, b, relay = await connect(nats_url), await connect(nats_url), await connect(nats_url)
    feed = f"{unique}.feed"
    try:
        sa = await replica(a, unique, feed)
        sb = await replica(b, unique, feed)
        go = f"{unique}.go"
        await serve_reads(b, go, sb)

        async def relayed(msg: Msg) -> None:
            await msg.respond((await relay.request(go, msg.data, timeout=10)).data)

        await relay.subscribe(f"{unique}.relay", cb=relayed)
        await relay.flush()
        stop = asyncio.Event()

        async def hammer(keys: list[str]) -> None:
            while not stop.is_set():
                for k in keys:
                    await sb.get(k)
                await asyncio.sleep(0)

        async def writer(w: int, rounds: int) -> None:
            key = f"w{w}/key"
            rev = 0
            for i in range(rounds):
                value = f"{w}:{i}".encode()
                step = i % 4
                if step == 0:
                    rev = await sa.put(key, value)
                elif step == 1:
                    rev = await sa.update(key, value, rev)
                    with pytest.raises(CasConflict):  # refused: must not change any answer
                        await sa.update(key, b"refused", rev - 1)
                elif step == 2:
                    await sa.delete(key, revision=rev)
                    value = b"-"
                else:
                    await sa.delete(key)
                    value = b"-"
                via = go if i % 3 else f"{unique}.relay"
                seen = (await a.request(via, key.encode(), timeout=10)).data
                assert seen == value, (key, i, seen, value)

        writers = 4
        hammers = [
            asyncio.create_task(hammer([f"w{w}/key" for w in range(writers)])) for _ in range(3)
        ]
        try:
            await asyncio.gather(*(writer(w, 600) for w in range(writers)))
        finally:
            stop.set()
            await asyncio.gather(*hammers)
        cache = sb.cache
        assert cache is not None and cache.active and cache.hits > 0
    finally:
        for nc in (a, b, relay):
            await nc.close()


async def test_a_read_in_flight_across_a_write_keeps_nothing(nats_url: str, unique: str) -> None:
    """B's read of the old value is held until A's write is acknowledged and B has seen its
    invalidation: the old value must not stay in B's cache."""
    a, b = await connect(nats_url), await connect(nats_url)
    feed = f"{unique}.feed"
    try:
        sa = await replica(a, unique, feed)
        sb = await replica(b, unique, feed)
        for i in range(20):
            await sa.put("held", f"old{i}".encode())
            await b.flush()  # this test reads at B directly, not through B's connection
            read_done, release = asyncio.Event(), asyncio.Event()
            plain = sb._get

            async def held(
                key: str,
                ekey: str,
                plain: Callable[[str, str], Awaitable[object]] = plain,
                read_done: asyncio.Event = read_done,
                release: asyncio.Event = release,
            ) -> object:
                got = await plain(key, ekey)
                read_done.set()
                await release.wait()
                return got

            sb._get = held  # type: ignore[method-assign]
            reader = asyncio.create_task(sb.get("held"))
            await read_done.wait()
            sb._get = plain  # type: ignore[method-assign]
            await sa.put("held", f"new{i}".encode())
            await b.flush()  # B has handled everything sent before this, the invalidation too
            release.set()
            old = await reader
            assert old is not None and old.value == f"old{i}".encode()
            got = await sb.get("held")
            assert got is not None and got.value == f"new{i}".encode()
    finally:
        await a.close()
        await b.close()


class Proxy:
    """A TCP proxy B connects through, so that B alone can be cut off from nats-server."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.open = True
        self.pipes: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.open:
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self.pipes += [writer, up_writer]

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, ConnectionError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))

    def cut(self) -> None:
        self.open = False
        for w in self.pipes:
            w.transport.abort()
        self.pipes.clear()

    async def close(self) -> None:
        self.cut()
        if self.server is not None:
            self.server.close()


async def test_a_reconnect_drops_the_cache(nats_url: str, unique: str) -> None:
    """Writes made while B was cut off never reach B's feed: B must not answer from what it
    cached before."""
    port = int(nats_url.rsplit(":", 1)[1])
    proxy = Proxy(port)
    proxy_url = f"nats://127.0.0.1:{await proxy.start()}"
    a, b = await connect(nats_url), await connect(proxy_url)
    feed = f"{unique}.feed"
    try:
        sa = await replica(a, unique, feed)
        sb = await replica(b, unique, feed)
        cache = sb.cache
        assert cache is not None
        for round_ in range(3):
            await sa.put("k", f"before{round_}".encode())
            await sa.delete("absent")
            await b.flush()  # this test reads at B directly, not through B's connection
            assert (await sb.get("k")).value == f"before{round_}".encode()  # type: ignore[union-attr]
            assert await sb.get("absent") is None
            hits = cache.hits
            assert (await sb.get("k")).value == f"before{round_}".encode()  # type: ignore[union-attr]
            assert cache.hits == hits + 1
            proxy.cut()
            await wait_for(lambda: not b.is_connected, "B sees the connection drop")
            await sa.put("k", f"after{round_}".encode())
            await sa.put("absent", b"here now")
            proxy.open = True
            await wait_for(lambda: b.is_connected, "B reconnects")
            got = await sb.get("k")
            assert got is not None and got.value == f"after{round_}".encode()
            got = await sb.get("absent")
            assert got is not None and got.value == b"here now"
            await wait_for(lambda: cache.active, "the cache is checked and on again")
            await sa.delete("absent")
    finally:
        await a.close()
        await b.close()
        await proxy.close()


async def test_direct_stream_changes_turn_the_cache_off(nats_url: str, unique: str) -> None:
    a, b = await connect(nats_url), await connect(nats_url)
    feed = f"{unique}.feed"
    try:
        sa = await replica(a, unique, feed)
        sb = await replica(b, unique, feed)
        await sa.put("k", b"v")
        await b.flush()
        assert (await sb.get("k")).value == b"v"  # type: ignore[union-attr]
        await a.jetstream().purge_stream(f"KV_{unique}")
        await b.flush()
        assert sb.cache is not None and not sb.cache.active
        assert await sb.get("k") is None
        assert sa.cache is not None and not sa.cache.active
    finally:
        await a.close()
        await b.close()


async def test_a_write_with_a_message_ttl_turns_the_cache_off(nats_url: str, unique: str) -> None:
    a = await connect(nats_url)
    try:
        st = await replica(a, unique, f"{unique}.feed")
        await st.get("k")
        ack = await a.request(f"$KV.{unique}.k", b"v", timeout=5, headers={"Nats-TTL": "1h"})
        assert b"error" not in ack.data, ack.data
        await a.flush()
        assert st.cache is not None and not st.cache.active
        assert (await st.get("k")).value == b"v"  # type: ignore[union-attr]
    finally:
        await a.close()


async def test_no_cache_without_a_lone_server(nats_url: str, unique: str) -> None:
    """A server that names other servers (a cluster) gives no order between the feed and the
    requests: the storage opens without a cache, and the stream is left as it was."""
    a = await connect(nats_url)
    try:
        a._server_info = {**a._server_info, "connect_urls": ["127.0.0.1:1"]}
        st = await JetStreamStorage.open(a.jetstream(), unique, cache_feed=f"{unique}.feed")
        assert st.cache is None
        assert (await a.jetstream().stream_info(f"KV_{unique}")).config.republish is None
    finally:
        await a.close()


async def test_no_cache_in_a_real_cluster(unique: str) -> None:
    """Two routed nats-servers: the INFO a client gets names the cluster."""
    dirs = [tempfile.mkdtemp(prefix="trellis-cache-") for _ in range(2)]
    cports = [free_port(), free_port()]
    routes = ",".join(f"nats://127.0.0.1:{p}" for p in cports)
    procs: list[tuple[subprocess.Popen[bytes], str]] = []
    try:
        for d, cp in zip(dirs, cports, strict=True):
            proc, url, _ = start_nats(
                d,
                extra=[
                    "--cluster_name",
                    unique,
                    "--cluster",
                    f"nats://127.0.0.1:{cp}",
                    "--routes",
                    routes,
                    "--server_name",
                    f"{unique}{cp}",
                ],
            )
            procs.append((proc, url))
        a = await connect(procs[0][1])
        try:
            st = await _open_when_jetstream_is_up(
                lambda: JetStreamStorage.open(a.jetstream(), unique, cache_feed=f"{unique}.f")
            )
            assert st.cache is None
        finally:
            await a.close()
    finally:
        for proc, _ in procs:
            stop_process(proc, signal.SIGTERM, 10)
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)


async def _open_when_jetstream_is_up(
    step: Callable[[], Awaitable[JetStreamStorage]],
) -> JetStreamStorage:
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        try:
            return await step()
        except (nats.errors.Error, TimeoutError):
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.2)
