"""ACL bootstrap without a configured management token, on two scheduler replicas behind one
gateway: of concurrent bootstraps exactly one wins (the log decides, so the replicas agree),
the others get Nomad's 400; the reset file in the server's data dir allows exactly one more."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import uuid
from pathlib import Path

import aiohttp
import pytest

from services.gateway.main import Gateway
from services.scheduler.acl_bootstrap import RESET_FILE
from services.scheduler.service import SchedulerService
from shared.bus import Bus
from shared.settings import Settings

pytestmark = [pytest.mark.nats, pytest.mark.asyncio]


async def test_first_bootstrap_wins_across_replicas(nats_url: str) -> None:
    data_dir = tempfile.mkdtemp(prefix="trellis-acl-")
    settings = Settings(
        nats_url=nats_url,
        cluster_name="ab" + uuid.uuid4().hex[:8],
        secrets_addr="127.0.0.1:0",
        workspace_addr="127.0.0.1:0",
        scheduler_addr="127.0.0.1:0",
        insecure_bus=True,  # throwaway cluster: name-derived keys (shared/service_identity.py)
        data_dir=data_dir,
    )
    buses = [await Bus.connect(nats_url, n) for n in ("g", "s1", "s2")]
    gw = Gateway(buses[0], settings)
    await gw.start()
    replicas = [
        SchedulerService(b, settings, acl_enabled=True, management_token="", lease_ttl=3.0)
        for b in buses[1:]
    ]
    for r in replicas:
        await r.start()
    url = gw.addresses["scheduler"] + "/v1/acl/bootstrap"
    try:
        async with aiohttp.ClientSession() as http:

            async def boot(body: object = None) -> tuple[int, str]:
                async with http.post(url, json=body) as r:
                    return r.status, await r.text()

            assert await boot({"BootstrapSecret": "not-a-uuid"}) == (400, "invalid acl token")
            answers = await asyncio.gather(*(boot() for _ in range(8)))
            won = [text for status, text in answers if status == 200]
            assert len(won) == 1, answers
            index = int(json.loads(won[0])["CreateIndex"])
            lost = {(s, t.strip()) for s, t in answers if s != 200}
            assert lost == {(400, f"ACL bootstrap already done (reset index: {index})")}
            for r in replicas:
                await r.replog.barrier()
                assert r.fsm.t.acl_bootstrap_index == index

            server_dir = Path(data_dir) / "scheduler"
            await asyncio.to_thread((server_dir / RESET_FILE).write_text, f"{index}\n")
            answers = await asyncio.gather(*(boot() for _ in range(4)))
            assert sorted(s for s, _ in answers) == [200, 400, 400, 400], answers
    finally:
        for r in replicas:
            await r.stop()
        await gw.stop()
        for b in buses:
            await b.close()
        shutil.rmtree(data_dir, ignore_errors=True)
