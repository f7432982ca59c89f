"""DR replication between two separate `trellis dev` instances (each its own nats-server and
service processes): lag under the primary's full write rate, beside the primary's local write
rate measured in the same run.

    python bench/replication.py [--seconds 5] [--clients 16]

Lag: the primary's WAL index (`last_wal` of sys/replication/dr/status) is sampled every 10 ms;
for each sample, the time until the secondary's `last_remote_wal` (applied to its storage and
acknowledged by its JetStream) reaches it, polled every 5 ms. Target: p99 under 1 s while the
primary writes at its full rate. The machine's load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.conftest import free_port
from tests.procs import DevProcess, start_dev

DR = "/v1/sys/replication/dr/"


def start_site(name: str) -> DevProcess:
    """A `trellis dev` with the secrets and replication services only (no crypto, workspace,
    scheduler: they would only share the 2 cores), its DR listener on a free port."""
    os.environ["TRELLIS_CLUSTER_ADDR"] = f"127.0.0.1:{free_port()}"
    try:
        return start_dev("--services", "replication", "--cluster-name", name)
    finally:
        del os.environ["TRELLIS_CLUSTER_ADDR"]


class Api:
    def __init__(self, session: aiohttp.ClientSession, site: DevProcess) -> None:
        self.s, self.base, self.token = session, site.secrets, site.root_token

    async def call(self, method: str, path: str, body: Any = None, token: str | None = None):
        hdr = {"X-Vault-Token": self.token if token is None else token}
        async with self.s.request(method, self.base + path, json=body, headers=hdr) as r:
            data = await r.json(content_type=None) if r.status != 204 else None
            if r.status >= 300:
                raise SystemExit(f"{method} {path}: {r.status} {data}")
            return data

    async def status(self) -> dict[str, Any]:
        return (await self.call("GET", DR + "status", token=""))["data"]


async def write_load(api: Api, seconds: float, clients: int, start: int) -> tuple[int, int]:
    """Closed-loop KV v2 writes of new keys; returns (acknowledged writes, errors)."""
    done = errors = 0
    counter = iter(range(start, 10**9))
    deadline = time.monotonic() + seconds
    hdr = {"X-Vault-Token": api.token}
    url = api.base + "/v1/secret/data/bench/"

    async def client() -> None:
        nonlocal done, errors
        while time.monotonic() < deadline:
            n = next(counter)
            body = {"data": {"password": "p" * 32, "n": n}}
            async with api.s.post(url + str(n), headers=hdr, json=body) as r:
                await r.read()
                if r.status == 200:
                    done += 1
                else:
                    errors += 1

    await asyncio.gather(*(client() for _ in range(clients)))
    return done, errors


async def wait_caught_up(a: Api, b: Api, within: float) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        p, s = await a.status(), await b.status()
        if s.get("state") == "stream-wals" and s["last_remote_wal"] >= p["last_wal"]:
            return
        await asyncio.sleep(0.05)
    raise SystemExit("the secondary did not catch up")


async def measure_lag(a: Api, b: Api, stop: asyncio.Event) -> list[float]:
    """Per primary WAL sample: seconds until the secondary had applied that index."""
    waiting: list[tuple[float, int]] = []
    lags: list[float] = []

    async def sample_primary() -> None:
        while not stop.is_set():
            at = time.monotonic()
            waiting.append((at, (await a.status())["last_wal"]))
            await asyncio.sleep(max(0.0, 0.01 - (time.monotonic() - at)))

    task = asyncio.create_task(sample_primary())
    try:
        while not stop.is_set() or waiting:
            applied = (await b.status())["last_remote_wal"]
            now = time.monotonic()
            while waiting and waiting[0][1] <= applied:
                lags.append(now - waiting.pop(0)[0])
            if stop.is_set() and waiting and now - waiting[0][0] > 30:
                raise SystemExit("the secondary stopped catching up")
            await asyncio.sleep(0.005)
    finally:
        task.cancel()
    return lags


def pct(values: list[float], p: float) -> float:
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(p) - 1]


async def main(seconds: float, clients: int) -> None:
    load_before = os.getloadavg()
    sites = [start_site("drbenchp"), start_site("drbenchs")]
    try:
        conn = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=conn) as session:
            a, b = Api(session, sites[0]), Api(session, sites[1])
            # 1. The primary alone: its local write rate.
            await a.call("POST", DR + "primary/enable", {})
            await write_load(a, 1.0, clients, 5 * 10**6)  # warm-up, not counted
            t0 = time.monotonic()
            local, _ = await write_load(a, seconds, clients, 0)
            local_rate = local / (time.monotonic() - t0)

            # 2. The same load with the secondary (other processes) streaming.
            body = await a.call("POST", DR + "primary/secondary-token", {"id": "bench"})
            token = body["wrap_info"]["token"]
            await b.call(
                "POST", DR + "secondary/enable", {"token": token, "primary_api_addr": a.base}
            )
            await wait_caught_up(a, b, 120)
            stop = asyncio.Event()
            lag_task = asyncio.create_task(measure_lag(a, b, stop))
            t0 = time.monotonic()
            streamed, errors = await write_load(a, seconds, clients, 10**6)
            repl_rate = streamed / (time.monotonic() - t0)
            stop.set()
            lags = await lag_task
            load_during = os.getloadavg()
    finally:
        for site in sites:
            site.stop()

    ms = [x * 1000 for x in lags]
    print(
        f"DR replication, two `trellis dev` instances, {clients} writers x {seconds:g}s "
        "(KV v2 writes of new keys through the primary's gateway)"
    )
    print(f"  primary local write rate          {local_rate:8.0f} writes/s   baseline")
    print(
        f"  write rate with a DR secondary    {repl_rate:8.0f} writes/s   "
        f"ratio {repl_rate / local_rate:.2f} x local ({errors} errors)"
    )
    print(
        f"  replication lag p50 / p99 / max   {pct(ms, 50):6.1f} / {pct(ms, 99):6.1f} / "
        f"{max(ms):6.1f} ms  ({len(ms)} samples; target p99 < 1000 ms)"
    )
    print(
        f"  load average (1 min) before / during: {load_before[0]:.2f} / {load_during[0]:.2f} "
        f"on {os.cpu_count()} cores"
    )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--clients", type=int, default=16)
    args = ap.parse_args()
    asyncio.run(main(args.seconds, args.clients))
