"""A client node's allocation long poll held by a scheduler replica that is killed (`kill -9`)
is never answered: NATS does not tell the requester. A replica that starts announces itself,
and the node polls it at once instead of waiting out the dead poll's 20 s timeout (new
allocations would otherwise start that much later after every scheduler restart)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from pathlib import Path

import pytest

from services.dev_launch import stop_process
from services.scheduler import wire
from services.scheduler.client import ClientAgent, NodeConfig
from services.scheduler.service import SchedulerService
from shared.bus import Bus
from shared.settings import Settings
from tests.procs import spawn_service

pytestmark = pytest.mark.nats

REPOLL_WITHIN = 5.0  # far below the dead poll's 20 s timeout


async def test_a_node_polls_a_new_replica_at_once_after_a_kill_9(
    nats_url: str, tmp_path: Path
) -> None:
    cluster = "ru" + uuid.uuid4().hex[:8]
    settings = Settings(
        nats_url=nats_url,
        cluster_name=cluster,
        secrets_addr="127.0.0.1:0",
        workspace_addr="127.0.0.1:0",
        scheduler_addr="127.0.0.1:0",
        insecure_bus=True,  # throwaway cluster: name-derived keys (shared/service_identity.py)
    )
    node_bus = await Bus.connect(nats_url, "node")
    announced = asyncio.Event()

    async def seen(_msg: object) -> None:
        announced.set()

    await node_bus.nc.subscribe(wire.subject(cluster, wire.REPLICA_UP), cb=seen)
    await node_bus.nc.flush()
    doomed = spawn_service("scheduler", nats_url, cluster, tmp_path)
    agent = ClientAgent(
        node_bus, settings, NodeConfig(name="poller", drivers=("mock",), data_dir=str(tmp_path))
    )
    new_bus: Bus | None = None
    new: SchedulerService | None = None
    try:
        # The doomed replica's own announcement is past: only the new one's may end the poll.
        await asyncio.wait_for(announced.wait(), 60)
        await asyncio.wait_for(agent.start(), 60)
        deadline = time.monotonic() + 15
        while agent._poll is None:
            assert time.monotonic() < deadline, "the node never polled"
            await asyncio.sleep(0.02)
        first = agent._poll
        await node_bus.nc.flush()  # the poll reached the doomed replica (the only one)
        os.kill(doomed.pid, signal.SIGKILL)
        await asyncio.to_thread(doomed.wait, 10)
        assert not first.done(), "the poll was answered before the kill"
        new_bus = await Bus.connect(nats_url, "sched-new")
        new = SchedulerService(new_bus, settings, heartbeat_ttl=5.0, lease_ttl=3.0)
        await new.start()
        started = time.monotonic()
        while len(new_bus._parked) < 1:  # the node's poll waits on the new replica
            took = time.monotonic() - started
            assert took < REPOLL_WITHIN, f"no poll reached the new replica in {took:.1f}s"
            await asyncio.sleep(0.02)
        assert first.cancelled()
    finally:
        await agent.stop()
        if new is not None:
            await new.stop()
        if new_bus is not None:
            await new_bus.close()
        await node_bus.close()
        stop_process(doomed, signal.SIGKILL, 10)
