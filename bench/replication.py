"""DR replication: lag under a sustained write load, and the catch-up rate of a fresh secondary,
beside the primary's local write rate measured in the same run (two nats-servers, in-process
services, as tests/integration/test_replication_setup.py sets them up).

    python bench/replication.py [--seconds 3] [--clients 16]

Lag: the primary's WAL index is sampled every 10 ms; for each sample, the time until the
secondary's last_remote_wal (applied and acknowledged by its JetStream) reaches it. Target: p99
lag under 1 s while the primary writes at its full rate.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import time
from pathlib import Path

import aiohttp
import structlog

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.integration.test_replication_setup import (
    Site,
    caught_up,
    close_site,
    enable_primary,
    enable_secondary,
    secondary_token,
    start_site,
)


async def write_load(site: Site, seconds: float, clients: int, start: int) -> tuple[int, int]:
    """Closed-loop KV v2 writes of new keys; returns (acknowledged writes, errors)."""
    done = errors = 0
    counter = iter(range(start, 10**9))
    deadline = time.monotonic() + seconds
    hdr = {"X-Vault-Token": site.cluster.root_token}
    url = site.cluster.secrets_url + "/v1/secret/data/bench/"

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal done, errors
        while time.monotonic() < deadline:
            n = next(counter)
            async with session.post(
                url + str(n), headers=hdr, json={"data": {"password": "p" * 32, "n": n}}
            ) as r:
                await r.read()
                if r.status == 200:
                    done += 1
                else:
                    errors += 1

    async with aiohttp.ClientSession() as s:
        await asyncio.gather(*(client(s) for _ in range(clients)))
    return done, errors


async def primary_wal(site: Site) -> int:
    assert site.repl is not None
    info = await site.repl.js.stream_info(f"KV_{site.repl.bucket}")
    return info.state.last_seq


async def measure_lag(a: Site, b: Site, stop: asyncio.Event) -> list[float]:
    """Per primary WAL sample: seconds until the secondary had applied that index."""
    assert b.repl is not None
    waiting: list[tuple[float, int]] = []
    lags: list[float] = []

    async def sample_primary() -> None:
        while not stop.is_set():
            waiting.append((time.monotonic(), await primary_wal(a)))
            await asyncio.sleep(0.01)

    task = asyncio.create_task(sample_primary())
    try:
        while not stop.is_set() or waiting:
            applied = b.repl.progress.last_remote_wal
            now = time.monotonic()
            while waiting and waiting[0][1] <= applied:
                lags.append(now - waiting.pop(0)[0])
            if stop.is_set() and waiting and now - waiting[0][0] > 30:
                raise SystemExit("the secondary stopped catching up")
            await asyncio.sleep(0.002)
    finally:
        task.cancel()
    return lags


def pct(values: list[float], p: float) -> float:
    return statistics.quantiles(values, n=100)[int(p) - 1] if len(values) > 1 else values[0]


async def main(seconds: float, clients: int) -> None:
    a, b = await asyncio.gather(start_site(), start_site())
    c: Site | None = None
    try:
        # 1. The primary alone: its local write rate (writes and WAL entries per second).
        await enable_primary(a)
        await write_load(a, 1.0, clients, 5 * 10**6)  # warm-up, not counted
        wal0 = await primary_wal(a)
        t0 = time.monotonic()
        local, _ = await write_load(a, seconds, clients, 0)
        local_s = time.monotonic() - t0
        local_rate, local_wal_rate = local / local_s, (await primary_wal(a) - wal0) / local_s

        # 2. The same load with a secondary streaming: write rate and replication lag.
        token = await secondary_token(a, "bench")
        code, body = await enable_secondary(b, token)
        assert code == 200, body
        await caught_up(a, b, within=60)
        stop = asyncio.Event()
        lag_task = asyncio.create_task(measure_lag(a, b, stop))
        t0 = time.monotonic()
        streamed, errors = await write_load(a, seconds, clients, 10**6)
        repl_rate = streamed / (time.monotonic() - t0)
        stop.set()
        lags = await lag_task
        await caught_up(a, b, within=60)

        # 3. A fresh secondary catches up with everything by Merkle sync.
        assert a.repl is not None
        entries = len(a.repl.indexer.index)
        c = await start_site()
        token = await secondary_token(a, "fresh")
        t0 = time.monotonic()
        code, body = await enable_secondary(c, token)
        assert code == 200, body
        await caught_up(a, c, within=300)
        catch_s = time.monotonic() - t0
        catch_rate = entries / catch_s
    finally:
        await asyncio.gather(*(close_site(s) for s in (a, b, c) if s is not None))

    ms = [x * 1000 for x in lags]
    print(
        f"DR replication, {clients} writers x {seconds:g}s per phase (KV v2 writes of new "
        "keys through the gateway)"
    )
    print(
        f"  primary local write rate          {local_rate:8.0f} writes/s "
        f"({local_wal_rate:.0f} WAL entries/s)   baseline"
    )
    print(
        f"  write rate with a DR secondary    {repl_rate:8.0f} writes/s   "
        f"ratio {repl_rate / local_rate:.2f} x local ({errors} errors)"
    )
    print(
        f"  replication lag p50 / p99 / max   {pct(ms, 50):6.1f} / {pct(ms, 99):6.1f} / "
        f"{max(ms):6.1f} ms  ({len(ms)} samples; target p99 < 1000 ms)"
    )
    print(
        f"  fresh secondary catch-up          {catch_rate:8.0f} entries/s "
        f"({entries} entries in {catch_s:.2f}s)   ratio {catch_rate / local_wal_rate:.2f} x "
        "the primary's local WAL rate"
    )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--clients", type=int, default=16)
    args = ap.parse_args()
    logging.disable(logging.CRITICAL)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    asyncio.run(main(args.seconds, args.clients))
