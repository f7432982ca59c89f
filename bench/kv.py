"""KV v2 read and write throughput and latency through the gateway at 1, 16 and 64 clients,
beside a trivial echo through the same gateway and NATS measured in the same run.

    python bench/kv.py [--seconds 3] [--clients 1,16,64]

Target: KV v2 read >= 50% of the echo rate.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import Result, closed_loop, report, trellis_dev


async def run(base: str, token: str, seconds: float, clients: list[int]) -> None:
    hdr = {"X-Vault-Token": token}
    async with aiohttp.ClientSession() as s:
        for i in range(64):
            async with s.post(
                f"{base}/v1/secret/data/bench/{i}",
                headers=hdr,
                json={"data": {"password": "p" * 32, "n": i}},
            ) as r:
                assert r.status == 200, await r.text()

    async def echo(session: aiohttp.ClientSession, n: int) -> bool:
        async with session.get(f"{base}/_echo") as r:
            await r.read()
            return r.status == 200

    async def read(session: aiohttp.ClientSession, n: int) -> bool:
        async with session.get(f"{base}/v1/secret/data/bench/{n % 64}", headers=hdr) as r:
            await r.read()
            return r.status == 200

    async def write(session: aiohttp.ClientSession, n: int) -> bool:
        async with session.post(
            f"{base}/v1/secret/data/w/{n % 256}", headers=hdr, json={"data": {"v": n}}
        ) as r:
            await r.read()
            return r.status == 200

    results: list[Result] = []
    baseline: dict[int, Result] = {}
    for c in clients:
        # Warm up once per level, then measure echo, read and write back to back.
        await closed_loop("warmup", c, 0.5, echo)
        baseline[c] = await closed_loop("echo", c, seconds, echo)
        results += [
            baseline[c],
            await closed_loop("kv2 read", c, seconds, read),
            await closed_loop("kv2 write", c, seconds, write),
        ]
    report(results, baseline)
    for c in clients:
        r = next(x for x in results if x.name == "kv2 read" and x.concurrency == c)
        print(f"kv2 read / echo at {c} clients: {r.rate / baseline[c].rate:.2f} (target >= 0.50)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--clients", default="1,16,64")
    args = ap.parse_args()
    clients = [int(x) for x in args.clients.split(",")]
    with trellis_dev("--services", "none") as dev:
        asyncio.run(run(dev.secrets, dev.root_token, args.seconds, clients))


if __name__ == "__main__":
    main()
