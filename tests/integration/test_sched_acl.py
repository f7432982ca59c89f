"""ACLs on the scheduler API: policies, tokens, the header aliases, the management token from
the environment (which counts as the ACL bootstrap; tests/security/test_acl_bootstrap.py has
the rest of the bootstrap rule)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import aiohttp
import pytest
import pytest_asyncio

from services.gateway.main import Gateway
from services.scheduler.service import SchedulerService
from shared.bus import Bus
from shared.settings import Settings

pytestmark = [pytest.mark.nats, pytest.mark.asyncio(loop_scope="module")]

ROOT = "root-" + uuid.uuid4().hex
JOB = {
    "Job": {
        "ID": "acl-job",
        "Type": "batch",
        "TaskGroups": [{"Name": "g", "Tasks": [{"Name": "t", "Driver": "mock"}]}],
    }
}


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def base(nats_url: str) -> AsyncIterator[str]:
    settings = Settings(
        nats_url=nats_url,
        cluster_name="a" + uuid.uuid4().hex[:8],
        secrets_addr="127.0.0.1:0",
        workspace_addr="127.0.0.1:0",
        scheduler_addr="127.0.0.1:0",
        insecure_bus=True,  # throwaway cluster: name-derived keys (shared/service_identity.py)
    )
    gbus, sbus = await Bus.connect(nats_url, "g"), await Bus.connect(nats_url, "s")
    gw = Gateway(gbus, settings)
    await gw.start()
    svc = SchedulerService(sbus, settings, acl_enabled=True, management_token=ROOT, lease_ttl=3.0)
    await svc.start()
    yield gw.addresses["scheduler"]
    await svc.stop()
    await gw.stop()
    await gbus.close()
    await sbus.close()


async def test_acl_flow(base: str) -> None:
    async with aiohttp.ClientSession() as http:

        async def call(
            method: str,
            path: str,
            token: str = "",
            header: str = "X-Sched-Token",
            body: object = None,
        ) -> tuple[int, object]:
            headers = {}
            if token:
                headers = (
                    {"Authorization": f"Bearer {token}"} if header == "bearer" else {header: token}
                )
            async with http.request(method, base + path, json=body, headers=headers) as r:
                data = await r.json() if r.content_type == "application/json" else await r.text()
                return r.status, data

        assert await call("GET", "/v1/jobs") == (403, "Permission denied")
        assert await call("GET", "/v1/jobs", "bogus") == (403, "ACL token not found")
        status, _ = await call("GET", "/v1/jobs", ROOT)
        assert status == 200
        # The configured management token is the bootstrap: anonymous bootstraps are refused.
        status, text = await call("POST", "/v1/acl/bootstrap")
        assert status == 400 and str(text).startswith("ACL bootstrap already done (reset index: ")
        # The management token works through every header form.
        secret = ROOT
        assert (await call("POST", "/v1/jobs", secret, "X-Nomad-Token", JOB))[0] == 200
        status, _ = await call(
            "POST",
            "/v1/acl/policy/readonly",
            secret,
            "bearer",
            {"Name": "readonly", "Rules": 'namespace "default" {\n policy = "read"\n}\n'},
        )
        assert status == 200
        status, tok = await call(
            "POST",
            "/v1/acl/token",
            ROOT,
            body={"Name": "reader", "Type": "client", "Policies": ["readonly"]},
        )
        assert status == 200
        reader = tok["SecretID"]
        status, jobs = await call("GET", "/v1/jobs", reader)
        assert status == 200 and [j["ID"] for j in jobs] == ["acl-job"]
        assert (await call("GET", "/v1/job/acl-job", reader, "bearer"))[0] == 200
        assert await call("POST", "/v1/jobs", reader, body=JOB) == (403, "Permission denied")
        assert (await call("GET", "/v1/jobs?namespace=other", reader))[0] == 403
        status, me = await call("GET", "/v1/acl/token/self", reader)
        assert status == 200 and me["Name"] == "reader"
        assert (await call("GET", "/v1/acl/tokens", reader))[0] == 403
        # `nomad acl token self` with the configured management token: Nomad's bootstrap token.
        status, boot = await call("GET", "/v1/acl/token/self", ROOT)
        assert status == 200 and boot["Type"] == "management" and boot["SecretID"] == ROOT
        assert boot["Name"] == "Bootstrap Token" and boot["Policies"] is None
        assert boot["AccessorID"] not in {tok["AccessorID"], ROOT}
        assert (await call("GET", "/v1/acl/token/self", ROOT))[1] == boot  # stable
        status, listed = await call("GET", "/v1/acl/tokens", ROOT)
        assert ROOT not in str(listed)  # its secret is in no record
        assert (await call("DELETE", f"/v1/acl/token/{tok['AccessorID']}", ROOT))[0] == 200
        assert await call("GET", "/v1/jobs", reader) == (403, "ACL token not found")
