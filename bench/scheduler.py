"""Scheduler benchmark: placements per second for one big job of mock allocations on many
simulated nodes, and job-register latency, beside an echo baseline through the same gateway and
NATS, measured in the same run. Garbage collection runs throughout (every --gc-interval seconds,
every threshold 0: each terminal record is collectable at once), so the figures include its
passes over the state; the registered jobs are dead batch jobs and it removes them.

    python bench/scheduler.py                     # short: 2,000 allocations on 200 nodes
    python bench/scheduler.py --allocs 10000 --nodes 1000
    python bench/scheduler.py --gc-interval 0     # without garbage collection
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from services.gateway.main import Gateway
from services.scheduler.client import ClientAgent, NodeConfig
from services.scheduler.service import SchedulerService
from shared.bus import Bus, CallContext
from shared.logging import configure_logging
from shared.messages import HttpRequest, HttpResponse
from shared.settings import Settings
from shared.subjects import ECHO
from tests.conftest import start_nats

C2M_RATE = 1500.0  # containers/s in HashiCorp's C2M run


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


async def timed(session: aiohttp.ClientSession, method: str, url: str, body: Any = None) -> float:
    start = time.perf_counter()
    async with session.request(method, url, json=body) as r:
        await r.read()
        if r.status != 200:
            text = await r.text()
            print(f"{method} {url}: {r.status} {text}", flush=True)
            raise RuntimeError(f"{method} {url}: {r.status} {text}")
    return time.perf_counter() - start


async def latencies(n: int, concurrency: int, call: Any) -> tuple[list[float], float]:
    out: list[float] = []
    queue = list(range(n))
    start = time.perf_counter()

    async def runner() -> None:
        while queue:
            i = queue.pop()
            out.append(await call(i))

    await asyncio.gather(*(runner() for _ in range(concurrency)))
    return out, time.perf_counter() - start


async def drained(svc: SchedulerService, limit: float) -> None:
    """Wait (bounded) until no evaluation is pending."""
    deadline = time.perf_counter() + limit
    report = time.perf_counter() + 5
    while time.perf_counter() < deadline:
        pending = sum(1 for e in svc.fsm.t.evals.values() if e["Status"] == "pending")
        if not pending:
            return
        if time.perf_counter() > report:
            report += 5
            stats = svc.broker.stats() if svc.broker else None
            print(f"  ... {pending} evaluations pending, broker {stats}", flush=True)
        await asyncio.sleep(0.05)


def small_job(i: int) -> dict[str, Any]:
    return {
        "Job": {
            "ID": f"reg-{i}",
            "Type": "batch",
            "Datacenters": ["dc1"],
            "TaskGroups": [
                {
                    "Name": "g",
                    "Count": 0,
                    "Tasks": [{"Name": "t", "Driver": "mock", "Config": {"run_for": "1s"}}],
                }
            ],
        }
    }


def big_job(count: int) -> dict[str, Any]:
    return {
        "Job": {
            "ID": "bench-big",
            "Type": "batch",
            "Datacenters": ["dc1"],
            "TaskGroups": [
                {
                    "Name": "g",
                    "Count": count,
                    "EphemeralDisk": {"SizeMB": 1},
                    "Tasks": [
                        {
                            "Name": "t",
                            "Driver": "mock",
                            "Config": {"run_for": "1h"},
                            "Resources": {"CPU": 20, "MemoryMB": 10},
                        }
                    ],
                }
            ],
        }
    }


GC_THRESHOLDS = (
    "TRELLIS_SCHEDULER_JOB_GC_THRESHOLD",
    "TRELLIS_SCHEDULER_EVAL_GC_THRESHOLD",
    "TRELLIS_SCHEDULER_BATCH_EVAL_GC_THRESHOLD",
    "TRELLIS_SCHEDULER_DEPLOYMENT_GC_THRESHOLD",
)


def gc_settings(interval: float) -> None:
    """The housekeeper reads these when the service starts (services/scheduler/housekeeper.py)."""
    if interval <= 0:
        os.environ["TRELLIS_SCHEDULER_GC_INTERVAL"] = "8760h"  # never within a run
        return
    os.environ["TRELLIS_SCHEDULER_GC_INTERVAL"] = f"{interval}s"
    for name in GC_THRESHOLDS:
        os.environ[name] = "0s"


async def main(args: argparse.Namespace) -> None:
    configure_logging(level="warning", json=False)
    gc_settings(args.gc_interval)
    tmp = tempfile.mkdtemp(prefix="trellis-bench-")
    proc, url, _ = start_nats(tmp)
    buses: list[Bus] = []
    try:
        settings = Settings(
            nats_url=url,
            cluster_name="bench",
            secrets_addr="127.0.0.1:0",
            workspace_addr="127.0.0.1:0",
            scheduler_addr="127.0.0.1:0",
            insecure_bus=True,  # throwaway cluster: name-derived keys (shared/service_identity.py)
        )
        buses = [await Bus.connect(url, n) for n in ("gw", "sched", "echo", "client")]
        gw = Gateway(buses[0], settings)
        await gw.start()
        svc = SchedulerService(buses[1], settings, heartbeat_ttl=30.0, workers=2)
        await svc.start()

        async def echo(req: HttpRequest, ctx: CallContext) -> HttpResponse:
            return HttpResponse(status=200, body=b"{}")

        await buses[2].serve(ECHO.on(settings.cluster_name), echo, HttpRequest, queue="echo")
        t0 = time.perf_counter()
        agent = ClientAgent(
            buses[3], settings, NodeConfig(name="sim", drivers=("mock",)), simulate=args.nodes
        )
        await agent.start()
        print(
            f"registered {args.nodes} simulated nodes in {time.perf_counter() - t0:.2f}s",
            flush=True,
        )
        base = gw.addresses["scheduler"]
        async with aiohttp.ClientSession() as s:
            print("measuring the echo baseline...", flush=True)
            await latencies(50, 8, lambda i: timed(s, "GET", base + "/_echo"))  # warm-up
            echo_lat, echo_wall = await latencies(
                args.requests, args.concurrency, lambda i: timed(s, "GET", base + "/_echo")
            )
            print("measuring job registration...", flush=True)
            reg_lat, reg_wall = await latencies(
                args.requests,
                args.concurrency,
                lambda i: timed(s, "POST", base + "/v1/jobs", small_job(i)),
            )

            # Let the registrations' evaluations drain so the figure below is placement only.
            await drained(svc, 60.0)
            print(f"placing {args.allocs} allocations...", flush=True)
            start = time.perf_counter()
            await timed(s, "POST", base + "/v1/jobs", big_job(args.allocs))
            placed_at = running_at = None
            deadline = start + args.timeout
            last_report = start
            while time.perf_counter() < deadline:
                allocs = svc.fsm.t.job_allocs("default", "bench-big")
                if time.perf_counter() - last_report > 5:
                    last_report = time.perf_counter()
                    evs = svc.fsm.t.job_evals("default", "bench-big")
                    print(
                        f"  ... {len(allocs)} placed, evals "
                        f"{sorted((e['Status'], e['TriggeredBy']) for e in evs)}, broker "
                        f"{svc.broker.stats() if svc.broker else None}",
                        flush=True,
                    )
                if placed_at is None and len(allocs) >= args.allocs:
                    placed_at = time.perf_counter()
                if (
                    placed_at
                    and sum(1 for a in allocs if a["ClientStatus"] == "running") >= args.allocs
                ):
                    running_at = time.perf_counter()
                    break
                await asyncio.sleep(0.02)
        regs_left = sum(1 for k in svc.fsm.t.jobs if "reg-" in k)
        await agent.stop(kill_tasks=False, report=False)
        await svc.stop()
        await gw.stop()

        def show(name: str, lat: list[float], wall: float) -> None:
            print(
                f"{name:<18} p50 {statistics.median(lat) * 1000:7.2f} ms   "
                f"p99 {pct(lat, 0.99) * 1000:7.2f} ms   {len(lat) / wall:8.0f} req/s"
            )

        print(f"\n{args.requests} requests each, concurrency {args.concurrency}")
        show("echo baseline", echo_lat, echo_wall)
        show("job register", reg_lat, reg_wall)
        p50 = statistics.median(reg_lat) / statistics.median(echo_lat)
        p99 = pct(reg_lat, 0.99) / pct(echo_lat, 0.99)
        thr = (len(reg_lat) / reg_wall) / (len(echo_lat) / echo_wall)
        print(f"register/echo ratio: p50 {p50:.2f}x   p99 {p99:.2f}x   throughput {thr:.2f}x")
        if args.gc_interval > 0:
            hk = svc.housekeeper
            print(
                f"garbage collection every {args.gc_interval:g}s: {hk.gc_passes} passes, "
                f"{hk.gc_seconds * 1000:.0f} ms in all (selection and its log write), "
                f"{hk.gc_removed} records removed; "
                f"{args.requests - regs_left} of the {args.requests} registered jobs collected"
            )
        if placed_at is None:
            print(f"\nplacements: not all {args.allocs} placed within {args.timeout}s")
            return
        rate = args.allocs / (placed_at - start)
        print(
            f"\nplacements: {args.allocs} allocations on {args.nodes} nodes in "
            f"{placed_at - start:.2f}s = {rate:.0f} placements/s "
            f"({rate / C2M_RATE:.2f}x Nomad C2M's {C2M_RATE:.0f}/s)"
        )
        if running_at is not None:
            print(
                f"all running (client reported) after {running_at - start:.2f}s = "
                f"{args.allocs / (running_at - start):.0f} allocs/s end to end"
            )
    finally:
        for b in buses:
            await b.close()
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--allocs", type=int, default=2000)
    p.add_argument("--nodes", type=int, default=200)
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--timeout", type=float, default=180.0)
    p.add_argument("--gc-interval", type=float, default=1.0, help="seconds; 0 turns GC off")
    asyncio.run(main(p.parse_args()))
