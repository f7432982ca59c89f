"""The blocking-query drill: the ordinary drill load idle, then again while a flood of blocking
scheduler queries (default 10,000) waits; reports both phases' p50/p99, the p99 ratio (goal:
within 2x of idle), resident memory per waiting query in the gateway and the scheduler, and
how many queries were still waiting (all of them should be) when the load ended."""

from __future__ import annotations

import asyncio
from typing import Any

from services.drill.base import DrillOptions, bring_up, finish, new_load, ticker, workdir
from services.drill.cluster import Cluster
from services.drill.flood import Flood, in_flight, per_waiter, rss_bytes, settle
from services.drill.load import Clock, Load
from services.drill.progress import Progress
from services.drill.stats import percentile

GOAL = 2.0


async def _phase(load: Load, progress: Progress, label: str, seconds: float) -> None:
    stop = asyncio.Event()
    tick = asyncio.create_task(ticker(load, progress, label, stop))
    await load.run_for(seconds)
    stop.set()
    await tick


async def run_blocking(opts: DrillOptions, waiters: int = 10_000) -> dict[str, Any]:
    progress = Progress(quiet=opts.quiet)
    with workdir(opts, "blocking") as wd, Cluster(wd, name="blocking") as cluster:
        progress.step("starting nats-server and one replica of each service")
        cluster.start_nats(1)
        services = opts.services if "scheduler" in opts.services else (*opts.services, "scheduler")
        opts.services = services
        bring_up(cluster, opts, dict.fromkeys(services, 1), progress)
        gateway = next(iter(cluster.gateways.values()))
        pids = {s: cluster.replicas_of(s)[0].pid for s in ("gateway", "scheduler")}
        clock = Clock()
        load = new_load(cluster, opts, clock)

        progress.step(f"ordinary load without waiters for {opts.duration:.0f}s")
        await _phase(load, progress, "idle", opts.duration)
        idle = [s.latency for s in load.samples]
        before = {k: rss_bytes(pid) for k, pid in pids.items()}
        base = max(await asyncio.to_thread(in_flight, gateway.scheduler), 0)

        progress.step(f"opening {waiters} blocking queries (index far ahead, wait=10m)")
        flood = Flood(gateway.scheduler, waiters, wait="10m", token=cluster.token)
        flood.start()
        try:
            opened = await asyncio.to_thread(flood.wait_open, base)
            limit = 3 * percentile(idle, 99)
            settled = await settle(gateway.scheduler, limit)
            start = clock.now()
            progress.step(f"ordinary load while {waiters} queries wait, {opts.duration:.0f}s")
            await _phase(load, progress, f"flood x{waiters}", opts.duration)
            end = clock.now()
            after = {k: rss_bytes(pid) for k, pid in pids.items()}
            still = await asyncio.to_thread(in_flight, gateway.scheduler) - base
        finally:
            progress.step("closing the blocking queries")
            held = flood.stop()

        busy = [s.latency for s in load.samples if s.start >= start]
        ratio = percentile(busy, 99) / percentile(idle, 99) if idle and busy else 0.0
        cost = per_waiter(before, after, waiters)
        early = held.get("answered", {})
        figures = {
            "waiters": waiters,
            "opened_seconds": round(opened, 2),
            "settled_seconds": round(settled, 2),
            "idle_p50_ms": round(percentile(idle, 50) * 1000, 2),
            "idle_p99_ms": round(percentile(idle, 99) * 1000, 2),
            "flood_p50_ms": round(percentile(busy, 50) * 1000, 2),
            "flood_p99_ms": round(percentile(busy, 99) * 1000, 2),
            "p99_ratio": round(ratio, 2),
            "goal_met": ratio <= GOAL and not early and still >= waiters,
            "rss_before": before,
            "rss_after": after,
            "bytes_per_waiter": cost,
            "still_waiting": still,
            "answered_early": early,
        }
        notes = [
            f"{waiters} blocking queries held by the gateway in {opened:.1f}s, "
            f"taken by the scheduler {settled:.1f}s later",
            f"ordinary p50/p99 idle {figures['idle_p50_ms']}/{figures['idle_p99_ms']} ms, "
            f"with waiters {figures['flood_p50_ms']}/{figures['flood_p99_ms']} ms: "
            f"p99 x{ratio:.2f} (goal <= {GOAL:g}x: {'met' if ratio <= GOAL else 'MISSED'})",
            *(
                f"{name}: RSS {before[name] / 2**20:.1f} -> {after[name] / 2**20:.1f} MiB, "
                f"{cost[name] / 1024:.1f} KiB per waiter"
                for name in sorted(pids)
            ),
            f"still waiting when the load ended: {still} of {waiters}; answered early: "
            f"{early or 'none'}",
        ]
        extra = {"blocking": figures, "notes": notes}
        return await finish("blocking", load, [], progress, (start, end), extra, cluster)
