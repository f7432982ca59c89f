"""Blocking-query benchmark: ordinary scheduler requests (job register, job list, node list)
measured idle, then again while 10,000 blocking queries wait, on one `trellis dev`, in the same
run; prints both p50/p99, their ratio (goal: p99 within 2x of idle) and the resident memory each
waiting query costs the gateway and the scheduler.

    python bench/blocking.py                       # 10,000 waiters, 10 s per phase
    python bench/blocking.py --waiters 2000 --seconds 5
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import trellis_dev
from services.drill.flood import (
    Flood,
    in_flight,
    per_waiter,
    rss_bytes,
    settle,
)
from services.supervisor import child_role, direct_children

GOAL = 2.0
OPS = ("job_register", "job_list", "node_list")
# Answered by the gateway alone: tells the gateway's share of a slowdown from the scheduler's.
PROBE = "gw_healthz"
MIX = (*OPS, PROBE)
JOBS = 24


def _children(parent: int, role: str) -> list[int]:
    return sorted(p for p in direct_children(parent) if child_role(p) == role)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))] * 1000 if ordered else 0.0


def job(name: str) -> dict[str, Any]:
    task = {"Name": "t", "Driver": "mock", "Config": {"run_for": "1s"}}
    group = {"Name": "g", "Count": 1, "Tasks": [task]}
    return {"Job": {"ID": name, "Name": name, "Type": "batch", "TaskGroups": [group]}}


async def ordinary(base: str, seconds: float, clients: int) -> dict[str, list[float]]:
    """Closed loop: `clients` clients, each sending the next request as soon as one answers,
    round-robin over OPS. Any answer but 200 is an error and stops the run."""
    lat: dict[str, list[float]] = {op: [] for op in MIX}
    seq = itertools.count()
    stop_at = time.perf_counter() + seconds
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:

        async def client() -> None:
            while time.perf_counter() < stop_at:
                n = next(seq)
                op = MIX[n % len(MIX)]
                if op == "job_register":
                    # A fixed set of jobs re-registered: both phases read the same state size.
                    req = session.post(f"{base}/v1/jobs", json=job(f"bench-{n % JOBS}"))
                elif op == PROBE:
                    req = session.get(f"{base}/healthz")
                elif op == "job_list":
                    req = session.get(f"{base}/v1/jobs")
                else:
                    req = session.get(f"{base}/v1/nodes")
                t0 = time.perf_counter()
                async with req as r:
                    await r.read()
                    if r.status != 200:
                        raise RuntimeError(f"{op}: {r.status} {await r.text()}")
                lat[op].append(time.perf_counter() - t0)

        await asyncio.gather(*(client() for _ in range(clients)))
    return lat


def quiet_index(base: str, quiet: float = 3.0, timeout: float = 120.0) -> int:
    """The jobs index once it has not moved for `quiet` seconds (evaluations of the load's
    registers settle), so that only the wake-up write moves it."""
    deadline = time.monotonic() + timeout
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"{base}/v1/jobs") as r:
            index = int(r.headers["X-Sched-Index"])
        if index != last:
            last, since = index, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return index
        time.sleep(0.2)
    raise TimeoutError("the jobs index never settled")


def wake_up(base: str, waiters: int, token: str, metrics: Sequence[str]) -> dict[str, Any]:
    """`waiters` blocking queries on the current jobs index, then one job register: how long
    until every one of them is answered (the thundering herd a UI full of tabs makes)."""
    index = quiet_index(base)
    baseline = max(in_flight(base, metrics), 0)
    flood = Flood(base, waiters, wait="5m", token=token, index=index, metrics=metrics)
    flood.start()
    try:
        flood.wait_open(baseline)
        req = urllib.request.Request(
            f"{base}/v1/jobs",
            data=json.dumps(job("bench-wake")).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        written = time.time()
        with urllib.request.urlopen(req) as r:
            r.read()
        flood.wait_answered()
    finally:
        result = flood.stop()
    result["written"] = written
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--waiters", type=int, default=10_000)
    ap.add_argument("--seconds", type=float, default=10.0, help="ordinary load per phase")
    ap.add_argument("--clients", type=int, default=4, help="ordinary closed-loop clients")
    ap.add_argument(
        "--no-wake", action="store_true", help="skip the wake-up phase (one write, all answered)"
    )
    args = ap.parse_args()

    with trellis_dev() as dev:
        # Every gateway process (several share the listeners on a machine with 2+ CPUs).
        procs = {k: _children(dev.proc.pid, k) for k in ("gateway", "scheduler")}
        print(f"trellis dev up; measuring {sorted(procs)} (pids {procs})", flush=True)
        # Warm-up: first requests pay imports, caches and connection set-up.
        asyncio.run(ordinary(dev.scheduler, 2.0, args.clients))
        idle = asyncio.run(ordinary(dev.scheduler, args.seconds, args.clients))
        before = {k: sum(map(rss_bytes, pids)) for k, pids in procs.items()}
        metrics = dev.gateway_metrics
        base_in_flight = max(in_flight(dev.scheduler, metrics), 0)
        flood = Flood(
            dev.scheduler, args.waiters, wait="10m", token=dev.root_token, metrics=metrics
        )
        flood.start()
        try:
            opened = flood.wait_open(base_in_flight)
            print(f"{args.waiters} blocking queries held by the gateway after {opened:.1f}s")
            limit = 3 * pct([x for v in idle.values() for x in v], 99) / 1000
            settled = asyncio.run(settle(dev.scheduler, limit))
            print(f"the scheduler had taken them all in {settled:.1f}s more", flush=True)
            busy = asyncio.run(ordinary(dev.scheduler, args.seconds, args.clients))
            after = {k: sum(map(rss_bytes, pids)) for k, pids in procs.items()}
            still = in_flight(dev.scheduler, metrics) - base_in_flight
        finally:
            result = flood.stop()
        woke = (
            None if args.no_wake else wake_up(dev.scheduler, args.waiters, dev.root_token, metrics)
        )

    print()
    print(
        f"{'op':<14}{'idle p50':>10}{'idle p99':>10}{'flood p50':>11}{'flood p99':>11}{'p99 x':>8}"
    )
    for op in [*MIX, "all"]:
        a = [x for k in OPS for x in idle[k]] if op == "all" else idle[op]
        b = [x for k in OPS for x in busy[k]] if op == "all" else busy[op]
        ratio = pct(b, 99) / pct(a, 99) if pct(a, 99) else 0.0
        print(
            f"{op:<14}{pct(a, 50):>10.2f}{pct(a, 99):>10.2f}{pct(b, 50):>11.2f}"
            f"{pct(b, 99):>11.2f}{ratio:>8.2f}"
        )
    all_idle = [x for k in OPS for x in idle[k]]
    all_busy = [x for k in OPS for x in busy[k]]
    ratio = pct(all_busy, 99) / pct(all_idle, 99)
    print(
        f"(latencies in ms; {len(all_idle)} idle and {len(all_busy)} flooded scheduler requests; "
        f"{PROBE} is answered by the gateway alone and is not in 'all')"
    )
    print(
        f"p99 with {args.waiters} waiters / idle: {ratio:.2f}x "
        f"(goal <= {GOAL:g}x: {'met' if ratio <= GOAL else 'MISSED'})"
    )
    cost = per_waiter(before, after, args.waiters)
    for name in sorted(procs):
        print(
            f"{name:<10} RSS {before[name] / 2**20:7.1f} MiB -> {after[name] / 2**20:7.1f} MiB: "
            f"{cost[name] / 1024:.1f} KiB per waiter ({len(procs[name])} process(es))"
        )
    print(f"still waiting after the flooded phase: {still} of {args.waiters}")
    print(f"answered before release (should be none): {result.get('answered', {}) or 'none'}")
    if woke is not None:
        first, last = woke["first_answer"], woke["last_answer"]
        print(
            f"wake-up: {args.waiters} queries on the current index, one job register: "
            f"{woke['answered']} answered, first {first - woke['written']:.2f}s and last "
            f"{last - woke['written']:.2f}s after the write"
            + (
                " (some woke before the write: a background change)"
                if first < woke["written"]
                else ""
            )
        )


if __name__ == "__main__":
    main()
