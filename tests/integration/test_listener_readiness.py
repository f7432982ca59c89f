"""Each listener's /readyz covers every service its API needs, through a real gateway on a real
nats-server: the secrets listener its service and the crypto workers, the workspace and
scheduler listeners their own service and an unsealed secrets service (their states and
variables are sealed under its data keys). Whatever is down is named; all up is 200."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from services.scheduler.service import SchedulerService
from services.workspace.service import WorkspaceService
from shared.bus import Bus
from tests.harness import Cluster, start_cluster
from tests.integration.test_pki_api import add_worker

pytestmark = [pytest.mark.nats]

APIS = ("secrets", "workspace", "scheduler")


async def readyz(c: Cluster) -> dict[str, tuple[int, dict[str, Any]]]:
    async with aiohttp.ClientSession() as s:
        out = {}
        for api in APIS:
            async with s.get(c.gateway.addresses[api] + "/readyz") as r:
                out[api] = (r.status, await r.json())
        return out


async def until(c: Cluster, what: str, check: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """Poll the three /readyz until `check` holds (probes are cached for a second)."""
    deadline = time.monotonic() + 20
    while True:
        got = await readyz(c)
        if check(got):
            return got
        assert time.monotonic() < deadline, (what, got)
        await asyncio.sleep(0.1)


def needs(answer: tuple[int, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {n["name"]: n for n in answer[1].get("needs", [])}


def all_ready(got: dict[str, Any]) -> bool:
    return all(got[api][0] == 200 for api in APIS)


async def test_each_listener_names_the_service_it_needs_that_is_down(nats_url: str) -> None:
    c = await start_cluster(nats_url, initialize=False)
    try:
        await add_worker(c)
        buses = [await Bus.connect(nats_url, name) for name in ("workspace", "scheduler")]
        c.buses += buses
        workspace = WorkspaceService(buses[0], c.settings)
        scheduler = SchedulerService(buses[1], c.settings)
        for svc in (workspace, scheduler):
            await svc.start()
            c.extra.append(svc)

        # Uninitialised: the secrets listener is ready (someone must be able to init it), the
        # other two need data keys it cannot hand out yet.
        def waiting_for_init(got: dict[str, Any]) -> bool:
            return got["secrets"][0] == 200 and all(
                got[api][0] == 503
                and got[api][1]["service"]["ready"] is True
                and needs(got[api])["secrets"].get("error") == "not initialized"
                for api in ("workspace", "scheduler")
            )

        await until(c, "workspace and scheduler wait for init", waiting_for_init)
        status, body = await c.request(
            "POST", "/v1/sys/init", token="", json={"secret_shares": 1, "secret_threshold": 1}
        )
        assert status == 200, body
        c.root_token, key = body["root_token"], body["keys"][0]
        status, body = await c.request("POST", "/v1/sys/unseal", json={"key": key})
        assert status == 200 and body["sealed"] is False, body
        got = await until(c, "every listener ready", all_ready)
        for api in ("workspace", "scheduler"):
            assert needs(got[api]) == {"secrets": {"name": "secrets", "ready": True, "status": 200}}
        assert got["secrets"][1]["service"]["behind"] == [{"name": "crypto", "ready": True}]

        # Sealed: still ready to be unsealed through the secrets listener; the others name it.
        status, body = await c.request("PUT", "/v1/sys/seal")
        assert status == 204, body

        def sealed(got: dict[str, Any]) -> bool:
            return got["secrets"][0] == 200 and all(
                got[api][0] == 503 and needs(got[api])["secrets"].get("error") == "sealed"
                for api in ("workspace", "scheduler")
            )

        await until(c, "workspace and scheduler unready while sealed", sealed)
        status, body = await c.request("POST", "/v1/sys/unseal", json={"key": key})
        assert status == 200 and body["sealed"] is False, body
        await until(c, "every listener ready after unseal", all_ready)

        # The workspace service itself down: only its listener is unready, naming it.
        await workspace.stop()
        c.extra.remove(workspace)
        await buses[0].close()  # its API subscription goes with its connection

        def workspace_down(got: dict[str, Any]) -> bool:
            ws = got["workspace"]
            return (
                ws[0] == 503
                and ws[1]["service"]["name"] == "workspace"
                and ws[1]["service"]["ready"] is False
                and needs(ws)["secrets"]["ready"] is True
                and got["secrets"][0] == 200
                and got["scheduler"][0] == 200
            )

        await until(c, "workspace listener unready without its service", workspace_down)

        # The secrets service gone: every listener is unready, each naming it.
        for svc in list(c.secrets):
            await c.stop_secrets_replica(svc)
        c.secrets.clear()

        def secrets_down(got: dict[str, Any]) -> bool:
            sched = got["scheduler"]
            return (
                got["secrets"][0] == 503
                and got["secrets"][1]["service"]["name"] == "secrets"
                and got["secrets"][1]["service"]["ready"] is False
                and sched[0] == 503
                and sched[1]["service"]["ready"] is True
                and needs(sched)["secrets"]["ready"] is False
                and needs(got["workspace"])["secrets"]["ready"] is False
            )

        await until(c, "every listener unready without the secrets service", secrets_down)
    finally:
        await c.close()
