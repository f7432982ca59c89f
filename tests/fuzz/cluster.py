"""A fuzzing target: gateway, secrets (initialised, unsealed), workspace and scheduler
services in-process on one nats-server. `python -m tests.fuzz.cluster` serves one until Ctrl-C,
for running `schemathesis run` by hand."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import logging
import os
import secrets
import sys
import tempfile
from dataclasses import dataclass, field

import aiohttp

from services.crypto.service import CryptoService
from services.scheduler.service import SchedulerService
from services.workspace.service import ADMIN_TOKEN_ENV, WorkspaceService
from shared.bus import Bus
from shared.logging import configure_logging
from tests.harness import Cluster, start_cluster

# The org and job that the documents' examples name, created up front so that example-driven
# cases reach real objects and not only 404s.
EXAMPLE_ORG = "my-org"
EXAMPLE_JOB = "example"


@dataclass
class FuzzTarget:
    cluster: Cluster
    admin_token: str
    # Ids of the seeded workspace objects (see _seed), for fuzzers to name real ones.
    ids: dict[str, str] = field(default_factory=dict)

    @property
    def secrets_url(self) -> str:
        return self.cluster.secrets_url

    @property
    def workspace_url(self) -> str:
        return self.cluster.workspace_url

    @property
    def scheduler_url(self) -> str:
        return self.cluster.scheduler_url

    async def close(self) -> None:
        await self.cluster.close()


async def _seed(t: FuzzTarget) -> None:
    ws_headers = {
        "Authorization": f"Bearer {t.admin_token}",
        "Content-Type": "application/vnd.api+json",
    }
    org = {"data": {"type": "organizations", "attributes": {"name": EXAMPLE_ORG, "email": "a@b.c"}}}
    ws = {"data": {"type": "workspaces", "attributes": {"name": "my-workspace"}}}
    job = {
        "Job": {
            "ID": EXAMPLE_JOB,
            "Type": "batch",
            "Datacenters": ["dc1"],
            "TaskGroups": [
                {
                    "Name": "g",
                    "Count": 1,
                    "Tasks": [{"Name": "t", "Driver": "mock", "Config": {"run_for": "1s"}}],
                }
            ],
        }
    }
    async with aiohttp.ClientSession() as s:
        w = t.workspace_url + "/api/v2/organizations"
        async with s.post(w, json=org, headers=ws_headers) as r:
            assert r.status == 201, await r.text()
        async with s.post(f"{w}/{EXAMPLE_ORG}/workspaces", json=ws, headers=ws_headers) as r:
            assert r.status == 201, await r.text()
            t.ids["workspace"] = (await r.json(content_type=None))["data"]["id"]
        await _seed_state_and_vars(s, t, ws_headers)
        async with s.post(t.scheduler_url + "/v1/jobs", json=job) as r:
            assert r.status == 200, await r.text()


async def _seed_state_and_vars(
    s: aiohttp.ClientSession, t: FuzzTarget, headers: dict[str, str]
) -> None:
    """A variable and a state version (with outputs, one sensitive) in the example workspace,
    which stays locked by the admin: state-version and variable operations reach real objects,
    and a well-formed create gets past the lock check."""
    api = f"{t.workspace_url}/api/v2"
    ws = t.ids["workspace"]
    var = {
        "data": {"type": "vars", "attributes": {"key": "region", "value": "eu", "category": "env"}}
    }
    async with s.post(f"{api}/workspaces/{ws}/vars", json=var, headers=headers) as r:
        assert r.status == 201, await r.text()
        t.ids["var"] = (await r.json(content_type=None))["data"]["id"]
    async with s.post(f"{api}/workspaces/{ws}/actions/lock", json={}, headers=headers) as r:
        assert r.status == 200, await r.text()
    outputs = {
        "url": {"value": "https://example.com", "type": "string"},
        "pw": {"value": "fuzz", "type": "string", "sensitive": True},
    }
    state = {"version": 4, "serial": 1, "lineage": "fuzz", "outputs": outputs, "resources": []}
    raw = json.dumps(state).encode()
    attrs = {
        "serial": 1,
        "lineage": "fuzz",
        "md5": hashlib.md5(raw).hexdigest(),
        "state": base64.b64encode(raw).decode(),
    }
    sv = {"data": {"type": "state-versions", "attributes": attrs}}
    async with s.post(f"{api}/workspaces/{ws}/state-versions", json=sv, headers=headers) as r:
        assert r.status == 201, await r.text()
        doc = (await r.json(content_type=None))["data"]
    t.ids["state-version"] = doc["id"]
    t.ids["output"] = doc["relationships"]["outputs"]["data"][0]["id"]


async def start_target(nats_url: str) -> FuzzTarget:
    """Everything a fuzz run talks to; scheduler ACLs are off (Nomad's default)."""
    # Per-request debug lines would cost more than the fuzzing itself; errors still print.
    configure_logging(json=False, level=os.environ.get("TRELLIS_FUZZ_LOG_LEVEL", "error"))
    # schemathesis probes with a NUL byte in a header; aiohttp answers 400 and logs a traceback.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    admin = os.environ.get(ADMIN_TOKEN_ENV) or "fuzz-admin-" + secrets.token_hex(8)
    cluster = await start_cluster(nats_url)
    try:
        # As in `trellis dev`: RSA keys (PKI, transit, identity tokens) come from a crypto worker.
        bus = await Bus.connect(nats_url, name="fuzz-crypto")
        cluster.buses.append(bus)
        crypto = CryptoService(bus, cluster.settings)
        await crypto.start()
        cluster.extra.append(crypto)
        bus = await Bus.connect(nats_url, name="fuzz-workspace")
        cluster.buses.append(bus)
        ws = WorkspaceService(bus, cluster.settings, admin_token=admin)
        await ws.start()
        cluster.extra.append(ws)
        bus = await Bus.connect(nats_url, name="fuzz-scheduler")
        cluster.buses.append(bus)
        sched = SchedulerService(bus, cluster.settings, acl_enabled=False)
        await sched.start()
        cluster.extra.append(sched)
        target = FuzzTarget(cluster, admin)
        await _seed(target)
    except BaseException:
        await cluster.close()
        raise
    return target


async def _serve_forever() -> None:
    from tests.conftest import start_nats

    store = tempfile.mkdtemp(prefix="trellis-fuzz-")
    proc, url, _ = start_nats(store)
    try:
        t = await start_target(url)
        print(f"secrets   {t.secrets_url}/v1  X-Vault-Token: {t.cluster.root_token}")
        print(f"workspace {t.workspace_url}  Authorization: Bearer {t.admin_token}")
        print(f"scheduler {t.scheduler_url}", flush=True)
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.Event().wait()
        await t.close()
    finally:
        proc.terminate()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve_forever())
    sys.exit(0)
