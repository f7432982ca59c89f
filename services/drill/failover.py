"""The NATS failover drill: a 3-node JetStream cluster (sync_interval: always, R3 KV and
streams), the leader of the secrets KV stream killed under write load and brought back; reports
the longest write stall and lost writes."""

from __future__ import annotations

import asyncio
from typing import Any

from services.drill.base import DrillOptions, bring_up, finish, new_load, ticker, workdir
from services.drill.cluster import Cluster, wait_for
from services.drill.faults import FaultEvent
from services.drill.load import Clock
from services.drill.progress import Progress
from services.drill.stats import longest_stall


async def run_failover(opts: DrillOptions, down: float = 10.0, writes: int = 0) -> dict[str, Any]:
    """`writes` > 0: each phase ends once that many KV writes were acknowledged in it (the kill
    at most at 25% of the duration, the restart at most `down` seconds after it, the end at most
    at the duration), instead of after fixed times."""
    progress = Progress(quiet=opts.quiet)
    with workdir(opts, "failover") as wd, Cluster(wd, name="failover") as cluster:
        progress.step("starting a 3-node NATS cluster (R3, sync_interval: always)")
        cluster.start_nats(3)
        replicas = {"secrets": 2, "gateway": 1, "crypto": 1, "workspace": 1, "scheduler": 1}
        bring_up(cluster, opts, replicas, progress)
        stream = f"KV_{cluster.name}-secrets"
        await asyncio.to_thread(
            wait_for, f"a leader for {stream}", lambda: bool(cluster.stream_leader(stream)), 30
        )
        clock = Clock()
        load = new_load(cluster, opts, clock)
        events: list[FaultEvent] = []
        kill_at = opts.duration * 0.25
        stop = asyncio.Event()
        done = asyncio.Event()  # `writes`: the last phase saw its writes
        info: dict[str, Any] = {"stream": stream}

        async def fault() -> None:
            await load.acked_after(0.0, writes, kill_at, "kv")
            leader = await asyncio.to_thread(cluster.stream_leader, stream)
            node = cluster.nats_node(leader)
            at = clock.now()
            await asyncio.to_thread(node.kill)
            events.append(FaultEvent(at, "kill", node.name))
            progress.update(f"kill -9 {node.name} (leader of {stream})", force=True)
            await load.acked_after(at, writes, at + down, "kv")
            info["down_seconds"] = round(clock.now() - at, 2)
            back = clock.now()
            await asyncio.to_thread(node.start)
            await asyncio.to_thread(wait_for, node.name, node.ready, 60)
            events[-1] = FaultEvent(at, "kill", node.name, until=clock.now())
            events.append(FaultEvent(back, "restart", node.name, until=clock.now()))
            info["killed_leader"] = leader
            info["new_leader"] = await asyncio.to_thread(cluster.stream_leader, stream)
            if writes:
                await load.acked_after(clock.now(), writes, opts.duration, "kv")
                done.set()

        def label() -> str:
            return "failover " + (
                "before" if not events else "during" if len(events) < 2 else "after"
            )

        progress.step(f"write load for {opts.duration:.0f}s; leader killed at {kill_at:.0f}s")
        tick = asyncio.create_task(ticker(load, progress, label, stop))
        await asyncio.gather(load.run_for(opts.duration, done), fault())
        stop.set()
        await tick
        kill = events[0]
        stall, stall_from = longest_stall(
            [t for w in load.ledger for t in [w.acked_at] if w.kind == "kv"],
            kill.at - 1.0,
            kill.until or clock.now(),
        )
        info["stall"] = {"seconds": round(stall, 2), "from": round(stall_from, 2)}
        return await finish(
            "nats-failover", load, events, progress, (kill.at, kill.until), info, cluster
        )
