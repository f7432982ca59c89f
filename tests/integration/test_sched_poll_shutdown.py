"""A client node's allocation long poll, on a real nats-server: it waits parked (no handler slot),
and a scheduler replica that stops answers it at once with what it has, instead of holding its
shutdown for the whole wait (`trellis dev` stopped in 9 s because of it)."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest

from services.scheduler import wire
from services.scheduler.client import ClientAgent, NodeConfig
from services.scheduler.service import SchedulerService
from shared.bus import Bus
from shared.settings import Settings

pytestmark = pytest.mark.nats

WAIT = 30.0  # the poll's wait: far longer than an answer at shutdown may take


async def test_a_stopping_scheduler_answers_a_waiting_node_poll_at_once(
    nats_url: str, tmp_path: Path
) -> None:
    settings = Settings(
        nats_url=nats_url,
        cluster_name="sp" + uuid.uuid4().hex[:8],
        secrets_addr="127.0.0.1:0",
        workspace_addr="127.0.0.1:0",
        scheduler_addr="127.0.0.1:0",
        insecure_bus=True,  # throwaway cluster: name-derived keys (shared/service_identity.py)
    )
    sched_bus = await Bus.connect(nats_url, "sched")
    node_bus = await Bus.connect(nats_url, "node")
    sched = SchedulerService(sched_bus, settings, heartbeat_ttl=5.0, lease_ttl=3.0)
    await sched.start()
    agent = ClientAgent(
        node_bus, settings, NodeConfig(name="poller", drivers=("mock",), data_dir=str(tmp_path))
    )
    try:
        await agent.register()  # the node only: no loops of its own polling meanwhile
        assert sched.replog is not None
        index = sched.replog.applied_index
        poll = asyncio.ensure_future(
            agent.rpc.request(
                wire.subject(settings.cluster_name, wire.NODE_ALLOCS),
                wire.NodeAllocs(
                    node_ids=agent.node_ids, index=index, wait=WAIT, secrets=agent.secrets
                ),
                wire.NodeAllocsReply,
                channel=wire.NODE_ALLOCS,
                timeout=WAIT + 10,
            )
        )
        deadline = time.monotonic() + 15
        while len(sched_bus._parked) < 1:  # parked: waiting without a handler slot
            assert not poll.done(), poll
            assert time.monotonic() < deadline, "the poll was never parked"
            await asyncio.sleep(0.02)
        started = time.monotonic()
        await sched.stop()
        await sched_bus.close()
        reply = await poll
        took = time.monotonic() - started
        assert took < WAIT / 3, f"the stopping scheduler answered after {took:.1f}s"
        assert reply.allocs == [] and reply.index >= index
    finally:
        await sched.stop()
        await sched_bus.close()
        await node_bus.close()
