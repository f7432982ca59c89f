"""Reading an allocation's logs and files needs the read-logs / read-fs capabilities, stopping
it alloc-lifecycle; the scheduler forwards the reads to the node running the allocation over
the bus (in-process cluster: gateway, scheduler with ACLs, one raw_exec client node)."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from services.gateway.main import Gateway
from services.scheduler.client.agent import run_client
from services.scheduler.service import SchedulerService
from shared.bus import Bus
from shared.settings import Settings
from tests.job_helpers import node_data_dir, task_python

pytestmark = [pytest.mark.nats, pytest.mark.asyncio(loop_scope="module")]

ROOT = "root-" + uuid.uuid4().hex


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def base(nats_url: str) -> AsyncIterator[str]:
    settings = Settings(
        nats_url=nats_url,
        cluster_name="d" + uuid.uuid4().hex[:8],
        secrets_addr="127.0.0.1:0",
        workspace_addr="127.0.0.1:0",
        scheduler_addr="127.0.0.1:0",
        insecure_bus=True,
    )
    buses = [await Bus.connect(nats_url, n) for n in ("g", "s", "c")]
    gw = Gateway(buses[0], settings)
    await gw.start()
    svc = SchedulerService(buses[1], settings, acl_enabled=True, management_token=ROOT)
    await svc.start()
    data_dir = node_data_dir()  # its task runs as nobody: not under pytest's private tmp
    agent = await run_client(buses[2], settings, drivers=("raw_exec",), data_dir=data_dir)
    yield gw.addresses["scheduler"]
    await agent.stop()
    shutil.rmtree(data_dir, ignore_errors=True)
    await svc.stop()
    await gw.stop()
    for b in buses:
        await b.close()


async def test_fs_and_logs_capabilities(base: str, tmp_path: Path) -> None:
    async with aiohttp.ClientSession() as http:

        async def call(method: str, url: str, token: str, body: Any = None, **params: str):
            headers = {"X-Nomad-Token": token}
            async with http.request(
                method, base + url, json=body, headers=headers, params=params
            ) as r:
                return r.status, await r.text()

        async def token_with(caps: list[str]) -> str:
            name = "p" + uuid.uuid4().hex[:6]
            rules = f'namespace "default" {{ capabilities = {caps!r} }}'.replace("'", '"')
            status, _ = await call(
                "POST", f"/v1/acl/policy/{name}", ROOT, {"Name": name, "Rules": rules}
            )
            assert status == 200
            status, text = await call(
                "POST", "/v1/acl/token", ROOT, {"Type": "client", "Policies": [name]}
            )
            assert status == 200, text
            return json.loads(text)["SecretID"]

        job = {
            "Job": {
                "ID": "acl-logs",
                "Type": "batch",
                "Datacenters": ["dc1"],
                "TaskGroups": [
                    {
                        "Name": "g",
                        "Tasks": [
                            {
                                "Name": "t",
                                "Driver": "raw_exec",
                                "Config": {"command": task_python(), "args": ["-c", "print(42)"]},
                                "Resources": {"CPU": 50, "MemoryMB": 32},
                            }
                        ],
                    }
                ],
            }
        }
        status, text = await call("POST", "/v1/jobs", ROOT, job)
        assert status == 200, text
        deadline = time.monotonic() + 30
        alloc_id = ""
        while time.monotonic() < deadline and not alloc_id:
            _, text = await call("GET", "/v1/job/acl-logs/allocations", ROOT)
            if '"complete"' in text:
                alloc_id = json.loads(text)[0]["ID"]
            else:
                await asyncio.sleep(0.2)
        assert alloc_id, "the job did not complete"
        logs = f"/v1/client/fs/logs/{alloc_id}"
        ls = f"/v1/client/fs/ls/{alloc_id}"
        reader = await token_with(["read-job"])
        log_reader = await token_with(["read-job", "read-logs"])
        fs_reader = await token_with(["read-fs"])
        assert (await call("GET", logs, reader, task="t", type="stdout", plain="true"))[0] == 403
        assert await call("GET", logs, log_reader, task="t", type="stdout", plain="true") == (
            200,
            "42\n",
        )
        assert (await call("GET", ls, log_reader, path="/"))[0] == 403
        status, text = await call("GET", ls, fs_reader, path="alloc/logs")
        assert status == 200 and "t.stdout.0" in text
        stop = f"/v1/allocation/{alloc_id}/stop"
        assert (await call("POST", stop, log_reader))[0] == 403
        assert (await call("POST", "/v1/system/gc", log_reader))[0] == 403
