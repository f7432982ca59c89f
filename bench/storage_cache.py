"""What the storage read cache (shared/storage_cache.py) saves per read and costs per write.

    python bench/storage_cache.py [--reads 8000] [--writes 3000]

Starts its own nats-server, then alternates (off, on, off, on): 16 concurrent readers of 16 keys
through one JetStreamStorage with its cache turned off or on, and 16 concurrent writers into a
bucket without and with the cache's republish feed. Prints CPU per operation of this process
and of nats-server (from /proc), and wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.dev_launch import stop_process
from shared.nats_inline import InlineClient
from shared.storage import JetStreamStorage
from tests.conftest import start_nats

WORKERS = 16


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(label: str, n: int, server: int, work: Callable[[int], Awaitable[None]]) -> None:
    s0, c0, t0 = cpu_seconds(server), time.process_time(), time.perf_counter()
    await asyncio.gather(*(work(w) for w in range(WORKERS)))
    s1, c1, t1 = cpu_seconds(server), time.process_time(), time.perf_counter()
    print(
        f"{label:10} this process {1e6 * (c1 - c0) / n:6.1f} µs/op   "
        f"nats-server {1e6 * (s1 - s0) / n:6.1f} µs/op   wall {1e6 * (t1 - t0) / n:6.1f} µs/op"
    )


async def run(reads: int, writes: int) -> None:
    proc, url, _ = start_nats(tempfile.mkdtemp(prefix="bench-cache-"))
    nc = InlineClient()
    try:
        await nc.connect(url)
        js = nc.jetstream()
        cached = await JetStreamStorage.open(js, "bench-cached", cache_feed="bench.feed")
        plain = await JetStreamStorage.open(js, "bench-plain")
        assert cached.cache is not None and cached.feed is not None
        for w in range(WORKERS):
            await cached.put(f"sys/token/id/k{w}", os.urandom(300))
        for mode in ("off", "on", "off", "on"):
            if mode == "on":
                cached.cache.activate(cached.feed._link())
            else:
                cached.cache.deactivate()

            async def read(w: int) -> None:
                for _ in range(reads // WORKERS):
                    await cached.get(f"sys/token/id/k{w}")

            await measure(f"get {mode}", reads, proc.pid, read)
            store = cached if mode == "on" else plain

            async def write(w: int, store: JetStreamStorage = store, mode: str = mode) -> None:
                for j in range(writes // WORKERS):
                    await store.put(f"w/{mode}{w}/{j}", os.urandom(300))

            await measure(f"put {mode}", writes, proc.pid, write)
    finally:
        await nc.close()
        stop_process(proc, signal.SIGTERM, 10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reads", type=int, default=8000)
    parser.add_argument("--writes", type=int, default=3000)
    args = parser.parse_args()
    asyncio.run(run(args.reads, args.writes))


if __name__ == "__main__":
    main()
