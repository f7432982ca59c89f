"""The network drill: every service reaches NATS through the fault proxy, which adds latency,
resets every connection and black-holes traffic in turn under load; then (where root and
nftables allow) a partition of one NATS node, else the report says why it was skipped."""

from __future__ import annotations

import asyncio
import os
import shutil
from dataclasses import replace
from typing import Any
from urllib.parse import urlparse

from services.drill.base import DrillOptions, bring_up, finish, new_load, ticker, workdir
from services.drill.cluster import Cluster
from services.drill.faults import FaultEvent
from services.drill.load import Clock
from services.drill.progress import Progress
from services.drill.proxy import FaultProxy


def partition_support() -> str:
    """'' when an nftables partition inside a network namespace can run here, else why not."""
    if os.geteuid() != 0:
        return "needs root (network namespaces and nftables)"
    missing = [t for t in ("nft", "ip", "unshare") if shutil.which(t) is None]
    if missing:
        return f"{', '.join(missing)} not installed (apt-get install nftables iproute2)"
    return ""


async def run_network(opts: DrillOptions) -> dict[str, Any]:
    progress = Progress(quiet=opts.quiet)
    with workdir(opts, "network") as wd, Cluster(wd, name="network") as cluster:
        progress.step("starting nats-server behind the fault proxy")
        cluster.start_nats(1)
        up = urlparse(cluster.nats[0].url)
        proxy = FaultProxy(up.hostname or "127.0.0.1", up.port or 4222)
        await proxy.start()
        cluster.nats_url_override = proxy.url
        try:
            replicas = dict.fromkeys(opts.services, 1)
            # bring_up blocks on subprocess readiness; the proxy must keep serving meanwhile.
            await asyncio.to_thread(bring_up, cluster, opts, replicas, progress)
            return await _drive(cluster, opts, proxy, progress, wd)
        finally:
            await proxy.stop()


async def _drive(
    cluster: Cluster, opts: DrillOptions, proxy: FaultProxy, progress: Progress, wd: Any
) -> dict[str, Any]:
    clock = Clock()
    load = await asyncio.to_thread(new_load, cluster, opts, clock)
    events: list[FaultEvent] = []
    d = opts.duration
    start = d * 0.2
    stop = asyncio.Event()
    state = {"label": "clean"}

    async def faults() -> None:
        await asyncio.sleep(start)
        # 1. latency on every NATS connection (each direction)
        at = clock.now()
        state["label"] = "latency 50ms"
        proxy.faults.latency, proxy.faults.jitter = 0.05, 0.01
        await asyncio.sleep(d * 0.2)
        proxy.clear()
        events.append(FaultEvent(at, "latency", "proxy", until=clock.now()))
        # 2. reset every connection: services reconnect
        at = clock.now()
        state["label"] = "reset"
        n = proxy.reset_all()
        await asyncio.sleep(d * 0.1)
        events.append(FaultEvent(at, f"reset x{n}", "proxy", until=clock.now()))
        # 3. drop everything for a while (a black hole, not an error)
        at = clock.now()
        state["label"] = "blackhole"
        proxy.faults.blackhole = True
        await asyncio.sleep(min(3.0, d * 0.1))
        proxy.clear()
        # Connections that stalled may be wedged; a reset makes the clients reconnect now.
        proxy.reset_all()
        events.append(FaultEvent(at, "blackhole", "proxy", until=clock.now()))
        state["label"] = "clean"

    progress.step(f"load for {d:.0f}s: latency, resets and a black hole between services and NATS")
    tick = asyncio.create_task(ticker(load, progress, lambda: f"network {state['label']}", stop))
    await asyncio.gather(load.run_for(d), faults())
    stop.set()
    await tick
    # Recovery from a fault is part of it: count until the first acked write afterwards.
    window_end = max(e.until or e.at for e in events) + 1.0
    why = partition_support()
    extra: dict[str, Any] = {
        "proxy_connections": proxy.connections,
        "partition": {"ran": False, "skipped": why} if why else {"ran": True},
        "notes": [f"nftables partition skipped: {why}"] if why else [],
    }
    report = await finish("network", load, events, progress, (start, window_end), extra, cluster)
    if not why:
        # The partition needs its own 3-node cluster in namespaces: run it as a second step.
        from services.drill.partition import run_partition

        part = await run_partition(replace(opts, duration=max(12.0, d * 0.5)))
        report["partition"] = part
        report["lost_writes"] += part.get("lost_writes", 0)
        report.setdefault("notes", []).extend(f"partition: {n}" for n in part.get("notes", []))
    return report
