"""Node liveness: every replica records heartbeats; the leader marks nodes whose heartbeats
stopped for a TTL `down` (their allocations are then lost and replaced) and nodes that
heartbeat again `ready`."""

from __future__ import annotations

import asyncio
import time

import msgspec
import structlog

from services.scheduler.state.fsm import SchedulerFSM
from shared.replog import ApplyError, ReplicatedLog

log = structlog.get_logger("scheduler.heartbeat")


class HeartbeatTracker:
    def __init__(self, fsm: SchedulerFSM, replog: ReplicatedLog, ttl: float) -> None:
        self.fsm = fsm
        self.replog = replog
        self.ttl = ttl
        self.last_seen: dict[str, float] = {}
        self._leader_since = 0.0
        self._task: asyncio.Task[None] | None = None

    def seen(self, node_ids: list[str]) -> None:
        now = time.monotonic()
        for n in node_ids:
            self.last_seen[n] = now

    def elected(self) -> None:
        # A new leader gives every node a full TTL before judging it.
        self._leader_since = time.monotonic()
        self._task = asyncio.create_task(self._run())

    async def demoted(self) -> None:
        task, self._task = self._task, None  # the loop checks it: a cancel may be swallowed
        if task is not None:
            task.cancel()
            await asyncio.wait([task], timeout=5)

    async def _run(self) -> None:
        while self._task is not None:
            await asyncio.sleep(self.ttl / 4)
            try:
                await self.check()
            except ApplyError as exc:
                log.warning("heartbeat check failed", error=exc.message)

    async def check(self) -> None:
        now = time.monotonic()
        down, up = [], []
        for node_id, node in self.fsm.t.nodes.items():
            last = max(self.last_seen.get(node_id, 0.0), self._leader_since)
            alive = now - last <= self.ttl
            if node.get("Status") in ("ready", "initializing") and not alive:
                down.append(node_id)
            elif (
                node.get("Status") == "down"
                and alive
                and node_id in self.last_seen
                and self.last_seen[node_id] > self._leader_since
            ):
                up.append(node_id)
        for ids, status in ((down, "down"), (up, "ready")):
            if ids:
                log.info("node status", status=status, nodes=len(ids))
                await self.replog.append(
                    "node.status",
                    msgspec.msgpack.encode({"node_ids": sorted(ids), "status": status}),
                )
