"""The leader's housekeeping duties: periodic job launches, node drains, and garbage
collection of terminal records. Each loop only decides; every change goes through the log."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from services.scheduler import gc
from services.scheduler.api.context import ApiContext
from services.scheduler.api.lifecycle import _next_periodic, launch_periodic
from services.scheduler.durations import parse_duration
from services.scheduler.state.tables import alloc_terminal, client_terminal, jkey

log = structlog.get_logger("scheduler.housekeeper")

SYSTEM_TYPES = ("system", "sysbatch")


def _env_duration(name: str, default_ns: int) -> int:
    raw = os.environ.get(name, "")
    if not raw:
        return default_ns
    try:
        return parse_duration(raw)
    except ValueError:
        log.warning("ignoring invalid duration", variable=name)
        return default_ns


def thresholds_from_env() -> gc.Thresholds:
    """Nomad's server gc settings, as TRELLIS_SCHEDULER_*_GC_THRESHOLD durations."""
    d = gc.Thresholds()
    return gc.Thresholds(
        job_ns=_env_duration("TRELLIS_SCHEDULER_JOB_GC_THRESHOLD", d.job_ns),
        eval_ns=_env_duration("TRELLIS_SCHEDULER_EVAL_GC_THRESHOLD", d.eval_ns),
        deployment_ns=_env_duration("TRELLIS_SCHEDULER_DEPLOYMENT_GC_THRESHOLD", d.deployment_ns),
        batch_eval_ns=_env_duration("TRELLIS_SCHEDULER_BATCH_EVAL_GC_THRESHOLD", d.batch_eval_ns),
    )


def drain_decisions(t: Any, now: int) -> tuple[list[str], list[str], list[str]]:
    """(allocations to migrate, system allocations to stop, nodes whose drain is complete).
    Per group at most migrate.max_parallel allocations are on the move at once; a moved
    allocation stops counting once its replacement runs. Pure."""
    migrate: list[str] = []
    stop: list[str] = []
    done: list[str] = []
    for node in t.nodes.values():
        strategy = node.get("DrainStrategy")
        if not strategy:
            continue
        forced = bool(strategy.get("ForceDeadline")) and now >= int(strategy["ForceDeadline"])
        live = [a for a in t.node_allocs(node["ID"]) if not alloc_terminal(a)]
        moving_groups: dict[tuple[str, str], int] = {}
        for a in t.node_allocs(node["ID"]):
            if not (a.get("DesiredTransition") or {}).get("Migrate"):
                continue
            nxt = t.allocs.get(a.get("NextAllocation") or "")
            settled = nxt is not None and (nxt["ClientStatus"] == "running" or client_terminal(nxt))
            if not settled:
                g = (jkey(a["Namespace"], a["JobID"]), a["TaskGroup"])
                moving_groups[g] = moving_groups.get(g, 0) + 1
        others = [a for a in live if a.get("JobType") not in SYSTEM_TYPES]
        for a in others:
            if (a.get("DesiredTransition") or {}).get("Migrate"):
                continue
            g = (jkey(a["Namespace"], a["JobID"]), a["TaskGroup"])
            job = t.jobs.get(g[0]) or {}
            tg = next((x for x in job.get("TaskGroups") or [] if x["Name"] == a["TaskGroup"]), {})
            parallel = int((tg.get("Migrate") or {}).get("MaxParallel") or 1)
            if forced or moving_groups.get(g, 0) < parallel:
                migrate.append(a["ID"])
                moving_groups[g] = moving_groups.get(g, 0) + 1
        system = [a for a in live if a.get("JobType") in SYSTEM_TYPES]
        if not others and not moving_groups:
            if system and not strategy.get("IgnoreSystemJobs"):
                stop.extend(a["ID"] for a in system)
            else:
                done.append(node["ID"])
    return migrate, stop, done


class Housekeeper:
    def __init__(self, ctx: ApiContext, *, gc_interval: float | None = None) -> None:
        self.ctx = ctx
        self.thresholds = thresholds_from_env()
        self.gc_interval = (
            gc_interval
            if gc_interval is not None
            else _env_duration("TRELLIS_SCHEDULER_GC_INTERVAL", 300 * 1_000_000_000) / 1e9
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._running = False
        # What collection has cost and removed on this replica (bench/scheduler.py shows it).
        self.gc_passes = 0
        self.gc_seconds = 0.0
        self.gc_removed = 0

    def elected(self) -> None:
        self._running = True
        self._tasks = [
            asyncio.create_task(self._loop(self.periodic_tick, 1.0)),
            asyncio.create_task(self._loop(self.drain_tick, 0.5)),
            asyncio.create_task(self._loop(self.gc_tick, self.gc_interval)),
        ]

    async def demoted(self) -> None:
        self._running = False  # the loops check it: a cancel may be swallowed
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)

    async def _loop(self, tick: Callable[[], Awaitable[None]], every: float) -> None:
        while self._running:
            try:
                await tick()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a failed pass is retried on the next one
                log.warning("housekeeping pass failed", error=str(exc))
            await asyncio.sleep(every)

    async def periodic_tick(self) -> None:
        t = self.ctx.t
        now = time.time_ns()
        for key, job in list(t.jobs.items()):
            p = job.get("Periodic") or {}
            if not p.get("Enabled") or job.get("Stop") or job.get("ParentID"):
                continue
            last = t.periodic_launch.get(key) or int(job.get("SubmitTime") or now)
            due = _next_periodic(job, last)
            if due is None or due > now:
                continue
            if p.get("ProhibitOverlap") and any(
                c.get("Status") != "dead" for c in t.children(job["Namespace"], job["ID"])
            ):
                continue  # Nomad skips the launch while a child still runs
            # Missed launches (no leader for a while) collapse into this one, as in Nomad.
            await launch_periodic(self.ctx, job, due, recorded_ns=max(due, now))

    async def drain_tick(self) -> None:
        migrate, stop, done = drain_decisions(self.ctx.t, time.time_ns())
        if migrate:
            await self.ctx.append("alloc.transition", {"ids": migrate, "trigger": "node-drain"})
        if stop:
            await self.ctx.append(
                "alloc.transition",
                {
                    "ids": stop,
                    "stop": True,
                    "trigger": "node-drain",
                    "description": "alloc is being drained",
                },
            )
        for node_id in done:
            await self.ctx.append(
                "node.drain", {"node_id": node_id, "strategy": None, "complete": True}
            )

    async def gc_tick(self) -> None:
        started = time.perf_counter()
        sel = gc.select(self.ctx.t, time.time_ns(), self.thresholds)
        if not sel.empty():
            await self.ctx.append("gc.apply", sel.payload())
        self.gc_passes += 1
        self.gc_seconds += time.perf_counter() - started
        self.gc_removed += sum(len(v) for v in sel.payload().values())
