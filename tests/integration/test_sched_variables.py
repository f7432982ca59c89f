"""Nomad Variables on a real nats-server with a real (unsealed) secrets service and two
scheduler replicas: CRUD, check-and-set conflicts, locks, ACL capabilities by path,
namespaces, and encryption at rest checked on the raw bytes of the scheduler's JetStream log;
plus the cluster view (leader, peers, raft configuration) of the two replicas."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import nats
import pytest
import pytest_asyncio

from services.scheduler.service import SchedulerService
from shared.bus import Bus
from tests.harness import Cluster, start_cluster

pytestmark = [pytest.mark.nats, pytest.mark.asyncio(loop_scope="module")]

ROOT = "root-" + uuid.uuid4().hex
MARKER = "s3cr3t-" + uuid.uuid4().hex  # a value that must never reach JetStream in the clear


@dataclass
class Env:
    base: str
    http: aiohttp.ClientSession
    cluster: Cluster
    schedulers: list[SchedulerService]
    nats_url: str

    async def call(
        self, method: str, path: str, body: Any = None, token: str = ROOT
    ) -> tuple[int, Any]:
        headers = {"X-Nomad-Token": token} if token else {}
        async with self.http.request(method, self.base + path, json=body, headers=headers) as r:
            text = await r.text()
            data = await r.json() if r.content_type == "application/json" else text
            return r.status, data


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def env(nats_url: str) -> AsyncIterator[Env]:
    cluster = await start_cluster(nats_url)
    buses = [await Bus.connect(nats_url, f"sched-{i}") for i in range(2)]
    scheds = [
        SchedulerService(
            b, cluster.settings, acl_enabled=True, management_token=ROOT, lease_ttl=3.0
        )
        for b in buses
    ]
    for s in scheds:
        await s.start()
    async with aiohttp.ClientSession() as http:
        yield Env(cluster.gateway.addresses["scheduler"], http, cluster, scheds, nats_url)
    for s in scheds:
        await s.stop()
    for b in buses:
        await b.close()
    await cluster.close()


async def until(check: Any, limit: float = 15.0) -> Any:
    deadline = time.monotonic() + limit
    while True:
        got = await check()
        if got:
            return got
        assert time.monotonic() < deadline, "condition not met before the deadline"
        await asyncio.sleep(0.05)


async def raw_log_bytes(env: Env) -> bytes:
    """Every message of the scheduler's log stream, as JetStream stores it."""
    nc = await nats.connect(env.nats_url)
    try:
        js = nc.jetstream()
        stream = f"{env.cluster.settings.cluster_name}_sched"
        info = await js.stream_info(stream)
        out = b""
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            msg = await js.get_msg(stream, seq)
            out += msg.data or b""
        return out
    finally:
        await nc.close()


async def test_crud_cas_and_encryption_at_rest(env: Env) -> None:
    status, var = await env.call("PUT", "/v1/var/app/db", {"Items": {"password": MARKER}})
    assert status == 200, var
    assert var["Items"] == {"password": MARKER} and var["Path"] == "app/db"
    assert var["CreateIndex"] == var["ModifyIndex"] > 0
    status, got = await env.call("GET", "/v1/var/app/db")
    assert status == 200 and got["Items"] == {"password": MARKER}
    status, listed = await env.call("GET", "/v1/vars?prefix=app/")
    assert status == 200 and [v["Path"] for v in listed] == ["app/db"]
    assert "Items" not in listed[0]  # metadata only
    # Check-and-set: a stale index answers 409 with the variable that won.
    status, conflict = await env.call("PUT", "/v1/var/app/db?cas=1", {"Items": {"x": "y"}})
    assert status == 409 and conflict["ModifyIndex"] == var["ModifyIndex"]
    assert conflict["Items"] == {"password": MARKER}
    status, conflict = await env.call("PUT", "/v1/var/app/db?cas=0", {"Items": {"x": "y"}})
    assert status == 409
    status, upd = await env.call(
        "PUT", f"/v1/var/app/db?cas={var['ModifyIndex']}", {"Items": {"password": MARKER, "u": "v"}}
    )
    assert status == 200 and upd["ModifyIndex"] > var["ModifyIndex"]
    status, text = await env.call("PUT", "/v1/var/app/db?cas=x", {"Items": {"x": "y"}})
    assert status == 400 and "can not parse cas" in text
    status, text = await env.call("PUT", "/v1/var/app/db", {})
    assert status == 400 and text == "variable missing required Items object"
    status, text = await env.call("PUT", "/v1/var/nomad/other", {"Items": {"a": "b"}})
    assert status == 400 and "reserved" in text
    # The value never reached the log in the clear, yet a second replica reads it back.
    raw = await raw_log_bytes(env)
    assert b"app/db" in raw and MARKER.encode() not in raw
    for s in env.schedulers:
        assert s.fsm.t.variables["default\x00app/db"]["_Sealed"]
    status, _ = await env.call("DELETE", f"/v1/var/app/db?cas={var['ModifyIndex']}")
    assert status == 409
    status, _ = await env.call("DELETE", f"/v1/var/app/db?cas={upd['ModifyIndex']}")
    assert status == 204
    assert (await env.call("GET", "/v1/var/app/db"))[0] == 404


async def test_pagination_and_filter(env: Env) -> None:
    for name in ("a", "b", "c"):
        assert (await env.call("PUT", f"/v1/var/page/{name}", {"Items": {"k": name}}))[0] == 200
    async with env.http.get(
        env.base + "/v1/vars?prefix=page/&per_page=2", headers={"X-Nomad-Token": ROOT}
    ) as r:
        first = await r.json()
        token = r.headers["X-Sched-NextToken"]
    assert [v["Path"] for v in first] == ["page/a", "page/b"] and token == "default.page/c"
    status, rest = await env.call("GET", f"/v1/vars?prefix=page/&per_page=2&next_token={token}")
    assert [v["Path"] for v in rest] == ["page/c"]
    status, filtered = await env.call("GET", '/v1/vars?filter=Path%20%3D%3D%20"page/b"')
    assert status == 200 and [v["Path"] for v in filtered] == ["page/b"]


async def test_locks(env: Env) -> None:
    body = {"Items": {"owner": "one"}, "Lock": {"TTL": "15s", "LockDelay": "15s"}}
    status, held = await env.call("PUT", "/v1/var/locks/leader?lock-acquire", body)
    assert status == 200, held
    lock_id = held["Lock"]["ID"]
    assert lock_id and held["Lock"]["TTL"] == "15s"
    status, other = await env.call("PUT", "/v1/var/locks/leader?lock-acquire", body)
    assert status == 409 and other["Lock"]["ID"] == ""  # the holder's ID is never shown
    status, _ = await env.call("PUT", "/v1/var/locks/leader", {"Items": {"owner": "two"}})
    assert status == 409
    status, _ = await env.call(
        "PUT", "/v1/var/locks/leader", {"Items": {"owner": "one!"}, "Lock": {"ID": lock_id}}
    )
    assert status == 200
    status, read = await env.call("GET", "/v1/var/locks/leader")
    assert read["Lock"]["ID"] == "" and read["Items"] == {"owner": "one!"}
    bad = {"Lock": {"ID": "not-the-holder"}}
    assert (await env.call("PUT", "/v1/var/locks/leader?lock-renew", bad))[0] == 409
    status, renewed = await env.call(
        "PUT", "/v1/var/locks/leader?lock-renew", {"Lock": {"ID": lock_id}}
    )
    assert status == 200 and renewed["Lock"]["ID"] == lock_id
    assert (await env.call("DELETE", "/v1/var/locks/leader"))[0] == 409
    status, released = await env.call(
        "PUT", "/v1/var/locks/leader?lock-release", {"Lock": {"ID": lock_id}}
    )
    assert status == 200 and "Lock" not in released
    assert (await env.call("PUT", "/v1/var/locks/leader?lock-acquire", body))[0] == 200


POLICY = """
namespace "default" {
  variables {
    path "team/*" { capabilities = ["read", "list", "write"] }
    path "team/locked" { capabilities = ["deny"] }
    path "shared/*" { capabilities = ["list"] }
  }
}
"""


async def test_acl_by_path(env: Env) -> None:
    status, _ = await env.call(
        "POST", "/v1/acl/policy/vars-team", {"Name": "vars-team", "Rules": POLICY}
    )
    assert status == 200
    status, tok = await env.call(
        "POST", "/v1/acl/token", {"Type": "client", "Policies": ["vars-team"]}
    )
    assert status == 200
    secret = tok["SecretID"]
    for path in ("team/x", "team/locked", "shared/y", "private/z"):
        assert (await env.call("PUT", f"/v1/var/{path}", {"Items": {"k": "v"}}))[0] == 200
    assert (await env.call("GET", "/v1/var/team/x", token=secret))[0] == 200
    assert (await env.call("PUT", "/v1/var/team/new", {"Items": {"a": "b"}}, token=secret))[
        0
    ] == 200
    assert (await env.call("DELETE", "/v1/var/team/x", token=secret))[0] == 403  # no destroy
    assert (await env.call("GET", "/v1/var/team/locked", token=secret))[0] == 403  # deny
    assert (await env.call("GET", "/v1/var/shared/y", token=secret))[0] == 403  # list only
    assert (await env.call("GET", "/v1/var/private/z", token=secret))[0] == 403
    status, listed = await env.call("GET", "/v1/vars", token=secret)
    paths = {v["Path"] for v in listed}
    assert {"team/x", "team/new", "shared/y"} <= paths
    assert not paths & {"team/locked", "private/z"}
    # A conflict shows items only to a reader: the list-only token sees metadata.
    status, conflict = await env.call(
        "PUT", "/v1/var/team/x?cas=1", {"Items": {"a": "b"}}, token=secret
    )
    assert status == 409 and conflict["Items"] == {"k": "v"}
    assert (await env.call("GET", "/v1/vars", token="not-a-token"))[0] == 403


async def test_namespaces(env: Env) -> None:
    status, _ = await env.call("POST", "/v1/namespace/prod", {"Name": "prod", "Description": "P"})
    assert status == 200
    status, ns = await env.call("GET", "/v1/namespace/prod")
    assert status == 200 and ns["Description"] == "P" and ns["CreateIndex"] > 0
    status, listed = await env.call("GET", "/v1/namespaces")
    assert [n["Name"] for n in listed] == ["default", "prod"]
    assert (await env.call("PUT", "/v1/var/db?namespace=prod", {"Items": {"k": "v"}}))[0] == 200
    status, text = await env.call("DELETE", "/v1/namespace/prod")
    assert status == 400 and "has variables" in text
    assert (await env.call("PUT", "/v1/var/db?namespace=nope", {"Items": {"k": "v"}}))[0] == 400
    assert (await env.call("DELETE", "/v1/var/db?namespace=prod"))[0] == 204
    assert (await env.call("DELETE", "/v1/namespace/prod"))[0] == 200
    assert (await env.call("GET", "/v1/namespace/prod"))[0] == 404
    assert (await env.call("DELETE", "/v1/namespace/default"))[0] == 400
    assert (await env.call("POST", "/v1/namespace/bad%20name", {}))[0] == 400


async def test_cluster_view_of_two_replicas(env: Env) -> None:
    async def both() -> Any:
        status, cfg = await env.call("GET", "/v1/operator/raft/configuration")
        return cfg if status == 200 and len(cfg["Servers"]) == 2 else None

    cfg = await until(both)
    assert sum(s["Leader"] for s in cfg["Servers"]) == 1
    assert {s["ID"] for s in cfg["Servers"]} == {s.replica_id for s in env.schedulers}
    assert all(s["Address"].endswith(":4647") for s in cfg["Servers"])
    status, leader = await env.call("GET", "/v1/status/leader")
    assert status == 200 and leader.endswith(":4647")
    status, members = await env.call("GET", "/v1/agent/members")
    assert len(members["Members"]) == 2
    assert (await env.call("GET", "/v1/operator/raft/configuration", token=""))[0] == 403
