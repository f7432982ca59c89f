"""Client nodes authenticate with their own node secret, on a real nats-server with an in-process
scheduler: forged client RPCs (wrong or missing secret) are refused and change nothing, the
secret never shows in the API, and a restarted client with its data dir is the same node."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from services.gateway.main import Gateway
from services.scheduler import nodeauth, wire
from services.scheduler.client import ClientAgent, NodeConfig
from services.scheduler.client.agent import build_node
from services.scheduler.service import SchedulerService
from shared.api_session import SessionClient
from shared.bus import Bus
from shared.cluster_identity import load_identity
from shared.errors import ServiceError
from shared.settings import Settings
from shared.subjects import API_SCHEDULER
from tests.teardown import Teardown

pytestmark = [pytest.mark.nats, pytest.mark.asyncio(loop_scope="module")]

JOB = {
    "Job": {
        "ID": "victim",
        "Type": "service",
        "Datacenters": ["dc1"],
        "TaskGroups": [
            {
                "Name": "g",
                "Count": 1,
                "Tasks": [{"Name": "t", "Driver": "mock", "Config": {"run_for": "1h"}}],
            }
        ],
    }
}


@dataclass
class Env:
    base: str
    settings: Settings
    sched: SchedulerService
    client: ClientAgent
    attacker: Bus
    client_bus: Bus
    data_dir: str

    def subject(self, name: str) -> str:
        return wire.subject(self.settings.cluster_name, name)

    def rpc(self) -> SessionClient:
        """The attacker's channel: it may open a sealed session like any node (the channel
        proves the scheduler to the node, not the node to the scheduler: node secrets do)."""
        c = self.settings.cluster_name
        key = load_identity(self.settings).public_key
        return SessionClient(self.attacker, c, "scheduler", API_SCHEDULER.on(c), key)

    async def call(self, name: str, message: Any, reply: Any) -> Any:
        return await self.rpc().request(
            self.subject(name), message, reply, channel=name, timeout=10
        )


async def until(check: Callable[[], Any], limit: float = 15.0) -> Any:
    deadline = time.monotonic() + limit
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError("condition not met before the deadline")
        await asyncio.sleep(0.05)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def env(nats_url: str) -> AsyncIterator[Env]:
    settings = Settings(
        nats_url=nats_url,
        cluster_name="ns" + uuid.uuid4().hex[:8],
        secrets_addr="127.0.0.1:0",
        workspace_addr="127.0.0.1:0",
        scheduler_addr="127.0.0.1:0",
        insecure_bus=True,  # throwaway cluster: name-derived keys (shared/service_identity.py)
    )
    buses = [await Bus.connect(nats_url, n) for n in ("gw", "sched", "client", "attacker")]
    gw = Gateway(buses[0], settings)
    await gw.start()
    # A few seconds: this loop, shared with the client, may stall on a loaded machine, and a
    # node marked down meanwhile would change the node the first test checks is unchanged.
    sched = SchedulerService(buses[1], settings, heartbeat_ttl=3.0, lease_ttl=3.0)
    await sched.start()
    data_dir = tempfile.mkdtemp(prefix="trellis-node-")
    client = ClientAgent(
        buses[2], settings, NodeConfig(name="honest", drivers=("mock",), data_dir=data_dir)
    )
    await client.start()
    yield Env(gw.addresses["scheduler"], settings, sched, client, buses[3], buses[2], data_dir)
    td = Teardown()
    await td.step("client stop", client.stop())
    await td.step("scheduler stop", sched.stop())
    await td.step("gateway stop", gw.stop())
    for b in buses:
        await td.step(f"bus {b.name} close", b.close())
    shutil.rmtree(data_dir, ignore_errors=True)
    td.finish()


async def running_alloc(env: Env, node_id: str) -> dict[str, Any]:
    t = env.sched.fsm.t
    return await until(
        lambda: next(
            (
                a
                for a in t.node_allocs(node_id)
                if a["ClientStatus"] == "running" and a["DesiredStatus"] == "run"
            ),
            None,
        )
    )


async def refused(env: Env, name: str, message: Any, reply: Any, code: int = 403) -> None:
    with pytest.raises(ServiceError) as err:
        await env.call(name, message, reply)
    assert err.value.code == code


async def test_forged_client_rpcs_are_refused_and_change_nothing(env: Env) -> None:
    async with aiohttp.ClientSession() as http, http.post(env.base + "/v1/jobs", json=JOB) as r:
        assert r.status == 200, await r.text()
    nid = env.client.node_ids[0]
    alloc = await running_alloc(env, nid)
    await env.sched.replog.barrier()
    t = env.sched.fsm.t
    node_before = dict(t.nodes[nid])
    wrong = str(uuid.uuid4())
    public = build_node(env.client.cfg, nid, "evil")

    # Registering the honest node's ID again: another secret, or none.
    await refused(
        env,
        wire.NODE_REGISTER,
        wire.NodeRegister(nodes=[{**public, "SecretID": wrong}]),
        wire.NodeRegistered,
    )
    await refused(
        env, wire.NODE_REGISTER, wire.NodeRegister(nodes=[public]), wire.NodeRegistered, 400
    )
    # Polling its allocations (which carry job specs) and reporting on them.
    for secrets in ({nid: wrong}, {}):
        await refused(
            env,
            wire.NODE_ALLOCS,
            wire.NodeAllocs(node_ids=[nid], index=0, wait=0, secrets=secrets),
            wire.NodeAllocsReply,
        )
        failed = {"ID": alloc["ID"], "ClientStatus": "failed", "TaskStates": {}}
        await refused(
            env,
            wire.ALLOC_UPDATE,
            wire.AllocUpdate(updates=[failed], secrets=secrets),
            wire.Ok,
        )
    # A node of the attacker's own, properly registered, cannot report on someone else's alloc.
    evil_id, evil_secret = str(uuid.uuid4()), str(uuid.uuid4())
    evil = {**build_node(env.client.cfg, evil_id, "evil"), "SecretID": evil_secret}
    await env.call(wire.NODE_REGISTER, wire.NodeRegister(nodes=[evil]), wire.NodeRegistered)
    ok = await env.call(
        wire.ALLOC_UPDATE,
        wire.AllocUpdate(updates=[failed], secrets={evil_id: evil_secret}),
        wire.Ok,
    )
    await env.sched.replog.wait_for(ok.index, 10)

    after = t.nodes[nid]
    for key in ("Name", "ModifyIndex", nodeauth.HASH_FIELD, "Status"):
        assert after.get(key) == node_before.get(key), key
    assert t.allocs[alloc["ID"]]["ClientStatus"] == "running"
    # The honest client still works with its own secret.
    honest = await env.client.rpc.request(
        env.subject(wire.NODE_ALLOCS),
        wire.NodeAllocs(node_ids=[nid], index=0, wait=0, secrets=env.client.secrets),
        wire.NodeAllocsReply,
        channel=wire.NODE_ALLOCS,
        timeout=10,
    )
    assert alloc["ID"] in [a["ID"] for a in honest.allocs]
    # The same request in the clear (as before the channel) is not even read.
    with pytest.raises(ServiceError) as err:
        await env.client_bus.request(
            env.subject(wire.NODE_ALLOCS),
            wire.NodeAllocs(node_ids=[nid], index=0, wait=0, secrets=env.client.secrets),
            wire.NodeAllocsReply,
            timeout=10,
        )
    assert err.value.code == 400


async def test_node_secret_is_not_in_the_api(env: Env) -> None:
    nid = env.client.node_ids[0]
    secret = env.client.secrets[nid]
    async with aiohttp.ClientSession() as http:
        for path in (f"/v1/node/{nid}", "/v1/nodes", "/v1/nodes?resources=true"):
            async with http.get(env.base + path) as r:
                text = await r.text()
                assert r.status == 200, text
                assert secret not in text
                assert nodeauth.secret_hash(secret) not in text
                assert "SecretHash" not in text and "SecretID" not in text


async def test_forged_heartbeats_do_not_revive_a_down_node(env: Env) -> None:
    nid = env.client.node_ids[0]
    t = env.sched.fsm.t
    env.client.heartbeating = False
    await until(lambda: t.nodes[nid]["Status"] == "down", 15)
    # For three heartbeat TTLs, forged heartbeats (wrong secret, no secret) keep coming; a
    # genuine one would bring the node back within one TTL.
    deadline = time.monotonic() + 3 * env.sched.heartbeat_ttl
    rpc = env.rpc()
    while time.monotonic() < deadline:
        for secrets in ({nid: str(uuid.uuid4())}, {}):
            await rpc.publish(
                env.subject(wire.HEARTBEAT),
                wire.Heartbeat(node_ids=[nid], secrets=secrets),
                channel=wire.HEARTBEAT,
            )
        assert t.nodes[nid]["Status"] == "down"
        await asyncio.sleep(0.1)
    env.client.heartbeating = True
    await until(lambda: t.nodes[nid]["Status"] == "ready", 15)


async def test_a_node_answers_fs_requests_of_the_scheduler_only_and_sealed(env: Env) -> None:
    """The scheduler's fs/log/restart/signal requests to a node are signed by its service key
    (shared/service_proof.py) and answered sealed to a one-time key: a forged request, or one
    signed by another service, gets no answer; the API still lists the allocation's files."""
    import msgspec
    import nats.errors

    from shared.service_identity import load_service_key
    from shared.service_proof import prove

    nid = env.client.node_ids[0]
    async with aiohttp.ClientSession() as http, http.post(env.base + "/v1/jobs", json=JOB) as r:
        assert r.status == 200, await r.text()
    alloc = await running_alloc(env, nid)
    async with (
        aiohttp.ClientSession() as http,
        http.get(env.base + f"/v1/client/fs/ls/{alloc['ID']}?path=/") as r,
    ):
        # The node's own answer came back through the sealed reply (a mock task has no alloc
        # dir: the node says so); a reply that did not open would be a 502, none a 504.
        text = await r.text()
        assert r.status == 200 or (r.status == 404 and "unknown allocation ID" in text), text
    subject = env.subject(f"{wire.NODE_FS}.{nid}")
    forged = wire.FsRequest(op="ls", alloc_id=alloc["ID"], reader_public=bytes(32))
    workspace = load_service_key(env.settings, "workspace")
    signed = msgspec.structs.replace(forged)
    signed.proof = prove(
        workspace, env.settings.cluster_name, wire.FS_PURPOSE, wire.fs_signed_bytes(nid, signed)
    )
    for req in (forged, signed):
        with pytest.raises(nats.errors.TimeoutError):
            await env.attacker.nc.request(subject, msgspec.msgpack.encode(req), timeout=1.0)


async def test_restarted_client_is_the_same_node(env: Env) -> None:
    nid = env.client.node_ids[0]
    await env.client.stop()
    again = ClientAgent(
        env.client_bus,
        env.settings,
        NodeConfig(name="honest", drivers=("mock",), data_dir=env.data_dir),
    )
    await again.start()  # registration with the kept secret is accepted
    try:
        assert again.node_ids == [nid]
        assert again.secrets[nid] == env.client.secrets[nid]
    finally:
        await again.stop()
