"""Periodic garbage collection with configured thresholds (TRELLIS_SCHEDULER_*_GC_THRESHOLD),
through a gateway and a real nats-server: the leader's own pass, not /v1/system/gc, removes a
finished batch job's records once job_gc_threshold has passed, and nothing of a live job."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from services.gateway.main import Gateway
from services.scheduler.client import ClientAgent, NodeConfig
from services.scheduler.service import SchedulerService
from shared.bus import Bus
from shared.settings import Settings
from tests.integration.test_sched_cluster import until
from tests.teardown import Teardown

pytestmark = [pytest.mark.nats, pytest.mark.asyncio(loop_scope="module")]

JOB_THRESHOLD = 4.0  # seconds


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def base(nats_url: str) -> AsyncIterator[str]:
    settings = Settings(
        nats_url=nats_url,
        cluster_name="gc" + uuid.uuid4().hex[:8],
        secrets_addr="127.0.0.1:0",
        workspace_addr="127.0.0.1:0",
        scheduler_addr="127.0.0.1:0",
        insecure_bus=True,  # throwaway cluster: name-derived keys (shared/service_identity.py)
    )
    env = {
        "TRELLIS_SCHEDULER_GC_INTERVAL": "200ms",
        "TRELLIS_SCHEDULER_JOB_GC_THRESHOLD": f"{JOB_THRESHOLD:g}s",
        "TRELLIS_SCHEDULER_EVAL_GC_THRESHOLD": "0s",
        "TRELLIS_SCHEDULER_BATCH_EVAL_GC_THRESHOLD": "0s",
        "TRELLIS_SCHEDULER_DEPLOYMENT_GC_THRESHOLD": "0s",
    }
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)  # read when the service builds its housekeeper
        buses = [await Bus.connect(nats_url, f"gc{i}") for i in range(3)]
        gw = Gateway(buses[0], settings)
        await gw.start()
        sched = SchedulerService(buses[1], settings, heartbeat_ttl=5.0)
        await sched.start()
    agent = ClientAgent(buses[2], settings, NodeConfig(name="gc-node", drivers=("mock",)))
    await agent.start()
    yield gw.addresses["scheduler"]
    td = Teardown()
    await td.step("client stop", agent.stop())
    await td.step("scheduler stop", sched.stop())
    await td.step("gateway stop", gw.stop())
    for b in buses:
        await td.step("bus close", b.close())
    td.finish()


def spec(job_id: str, kind: str, run_for: str) -> dict[str, Any]:
    task = {"Name": "t", "Driver": "mock", "Config": {"run_for": run_for}}
    group = {"Name": "g", "Count": 1, "Tasks": [task]}
    return {"Job": {"ID": job_id, "Type": kind, "Datacenters": ["dc1"], "TaskGroups": [group]}}


async def test_periodic_gc_honours_the_job_threshold(base: str) -> None:
    async with aiohttp.ClientSession(base_url=base) as http:

        async def get(path: str) -> tuple[int, Any]:
            async with http.get(path) as r:
                return r.status, (await r.json() if r.status == 200 else None)

        async with http.post("/v1/jobs", json=spec("live", "service", "1h")) as r:
            assert r.status == 200
        async with http.post("/v1/jobs", json=spec("done", "batch", "100ms")) as r:
            assert r.status == 200
        registered = time.monotonic()  # after its SubmitTime: the age below is a lower bound

        async def finished() -> Any:
            status, allocs = await get("/v1/job/done/allocations")
            return status == 200 and allocs and allocs[0]["ClientStatus"] == "complete" and allocs

        [alloc] = await until(finished, limit=30)
        _, evals = await get("/v1/job/done/evaluations")
        _, live_evals = await get("/v1/job/live/evaluations")
        assert evals and live_evals

        async def collected() -> bool:
            return (await get("/v1/job/done"))[0] == 404

        await until(collected, limit=60)
        # Not before job_gc_threshold, counted from the job's submission.
        assert time.monotonic() - registered >= JOB_THRESHOLD - 0.25  # wall vs monotonic
        assert (await get(f"/v1/allocation/{alloc['ID']}"))[0] == 404
        for ev in evals:
            assert (await get(f"/v1/evaluation/{ev['ID']}"))[0] == 404
        # A running job keeps everything, whatever the thresholds.
        status, job = await get("/v1/job/live")
        assert status == 200 and job["Status"] == "running"
        for ev in live_evals:
            assert (await get(f"/v1/evaluation/{ev['ID']}"))[0] == 200
