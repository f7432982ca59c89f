"""The scaling drill: the same load against 1, then 2, then 4 replicas of every service (added
to the running cluster), with CPU seconds per request for each service, nats-server and the
load generator, so the report names the bottleneck and where the next core would go."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from services.drill.base import DrillOptions, bring_up, finish, new_load, ticker, workdir
from services.drill.cluster import Cluster
from services.drill.cpu import cpu_seconds
from services.drill.load import Clock
from services.drill.progress import Progress
from services.drill.scaling import analyse, scale_step
from services.drill.stats import percentile


def cpu_by_service(cluster: Cluster) -> dict[str, float]:
    out: dict[str, float] = {}
    for p in [*cluster.procs, *cluster.nats]:
        key = "nats-server" if p in cluster.nats else p.service
        out[key] = out.get(key, 0.0) + cpu_seconds(p.pid)
    # The load generator shares the same cores, so its cost is part of the picture.
    out["load-generator"] = cpu_seconds(os.getpid())
    return out


async def run_scale(opts: DrillOptions, steps: list[int] | None = None) -> dict[str, Any]:
    steps = steps or [1, 2, 4]
    progress = Progress(quiet=opts.quiet)
    with workdir(opts, "scale") as wd, Cluster(wd, name="scale") as cluster:
        progress.step("starting nats-server and 1 replica of each service")
        cluster.start_nats(1)
        bring_up(cluster, opts, dict.fromkeys(opts.services, 1), progress)
        clock = Clock()
        load = new_load(cluster, opts, clock)
        results = []
        for n in steps:
            for service in opts.services:
                more = [cluster.add(service) for _ in range(n - len(cluster.replicas_of(service)))]
                if service == "gateway":
                    load.gateways = list(cluster.gateways.values())
                await asyncio.to_thread(cluster.wait_ready, more)
            progress.step(f"{n} replica(s) of each service: load for {opts.duration:.0f}s")
            before, first, t0 = cpu_by_service(cluster), len(load.samples), clock.now()
            stop = asyncio.Event()
            tick = asyncio.create_task(ticker(load, progress, f"scale x{n}", stop))
            await load.run_for(opts.duration)
            stop.set()
            await tick
            seconds = clock.now() - t0
            after = cpu_by_service(cluster)
            window = load.samples[first:]
            cpu = {k: max(0.0, after.get(k, 0.0) - before.get(k, 0.0)) for k in after}
            p99 = round(percentile([s.latency for s in window], 99) * 1000, 2)
            results.append(scale_step(n, len(window), seconds, p99, cpu))
        extra = {"scale": analyse(results, os.cpu_count() or 1), "cpu_source": "/proc/<pid>/stat"}
        return await finish("scale", load, [], progress, (None, None), extra, cluster)
