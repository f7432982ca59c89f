"""The process-chaos drill: kill -9 or SIGSTOP/SIGCONT a random replica of a random service
every few seconds under load, restart the killed ones, and check no acknowledged write is lost
and clients only saw 503/504 while a replica was down."""

from __future__ import annotations

import asyncio
import random
import signal
from pathlib import Path
from typing import Any

from services.drill.base import DrillOptions, bring_up, finish, new_load, ticker, workdir
from services.drill.cluster import Cluster, Proc
from services.drill.faults import FaultEvent
from services.drill.load import Clock, Load
from services.drill.progress import Progress

REPLICAS = 2  # per service: one can die while the other serves


async def _restart(proc: Proc, clock: Clock, events: list[FaultEvent], delay: float) -> None:
    await asyncio.sleep(delay)  # pacing the restart, like a supervisor's backoff
    at = clock.now()
    await asyncio.to_thread(proc.start)
    ready_at = at + 60.0
    for _ in range(600):
        if await asyncio.to_thread(proc.ready):
            ready_at = clock.now()
            break
        await asyncio.sleep(0.1)
    events.append(FaultEvent(at, "restart", proc.name, until=ready_at))


async def chaos_monkey(
    cluster: Cluster,
    clock: Clock,
    events: list[FaultEvent],
    rng: random.Random,
    until: float,
    interval: float,
    progress: Progress,
) -> None:
    """One fault every `interval` seconds until `until`; never the last live replica."""
    restarts: list[asyncio.Task[None]] = []
    while clock.now() < until:
        services = sorted({p.service for p in cluster.procs})
        rng.shuffle(services)
        for service in services:
            live = [p for p in cluster.replicas_of(service) if p.alive() and not p.stopped]
            if len(live) < 2:
                continue
            victim = rng.choice(live)
            if rng.random() < 0.7:
                at = clock.now()
                await asyncio.to_thread(victim.kill)
                events.append(FaultEvent(at, "kill", victim.name))
                restarts.append(asyncio.create_task(_restart(victim, clock, events, 1.0)))
                progress.update(f"kill -9 {victim.name}", force=True)
            else:
                at = clock.now()
                victim.signal(signal.SIGSTOP)
                pause = rng.uniform(0.5, 2.0)
                await asyncio.sleep(pause)
                victim.signal(signal.SIGCONT)
                events.append(FaultEvent(at, "stop", victim.name, until=clock.now()))
                progress.update(f"SIGSTOP {victim.name} for {pause:.1f}s", force=True)
            break
        await asyncio.sleep(max(0.0, interval - 0.1))
    await asyncio.gather(*restarts)


async def run_chaos(opts: DrillOptions, writes: int = 0) -> dict[str, Any]:
    """`writes` > 0: the phases before and after the faults end once that many writes were
    acknowledged in them (and every killed replica is back), not after fixed times; the faults
    keep their share of the duration."""
    rng = random.Random(opts.seed)
    progress = Progress(quiet=opts.quiet)
    with workdir(opts, "chaos") as wd, Cluster(wd, name="chaos") as cluster:
        return await _run(cluster, opts, rng, progress, wd, writes)


async def _run(
    cluster: Cluster,
    opts: DrillOptions,
    rng: random.Random,
    progress: Progress,
    wd: Path,
    writes: int,
) -> dict[str, Any]:
    progress.step(f"starting nats-server and {REPLICAS} replicas of {', '.join(opts.services)}")
    cluster.start_nats(1)
    bring_up(cluster, opts, dict.fromkeys(opts.services, REPLICAS), progress)
    clock = Clock()
    load: Load = new_load(cluster, opts, clock)
    events: list[FaultEvent] = []
    # Before: 20% of the time; faults for 60%; after: 20% with every replica back.
    start, end = opts.duration * 0.2, opts.duration * 0.8
    stop = asyncio.Event()
    done = asyncio.Event()  # `writes`: the phase after the faults saw its writes

    def label() -> str:
        t = clock.now()
        return "chaos " + ("before" if t < start else "during" if t < end else "after")

    async def faults() -> None:
        nonlocal start, end
        await load.acked_after(0.0, writes, start)
        start, end = clock.now(), clock.now() + end - start
        await chaos_monkey(cluster, clock, events, rng, end, opts.interval, progress)
        if writes:
            await load.acked_after(clock.now(), writes, opts.duration)
            done.set()

    progress.step(f"load for {opts.duration:.0f}s, faults every {opts.interval:.0f}s")
    tick = asyncio.create_task(ticker(load, progress, label, stop))
    await asyncio.gather(load.run_for(opts.duration, done), faults())
    stop.set()
    await tick
    fault_end = max([end, *(e.until or e.at for e in events)])
    return await finish(
        "chaos",
        load,
        events,
        progress,
        (start, fault_end),
        {"replicas": REPLICAS, "logs": str(wd / "logs") if opts.workdir else None},
        cluster,
    )
