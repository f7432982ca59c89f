"""The scheduler end to end on a real nats-server: gateway, two scheduler replicas, two client
nodes, HTTP and python-nomad (unmodified) as a new user would drive them."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import aiohttp
import nomad
import pytest
import pytest_asyncio

from services.gateway.main import Gateway
from services.scheduler.client import ClientAgent, NodeConfig
from services.scheduler.service import SchedulerService
from shared.bus import Bus
from shared.settings import Settings
from tests.teardown import Teardown

pytestmark = [pytest.mark.nats, pytest.mark.asyncio(loop_scope="module")]

HCL = """
variable "sleep_for" {
  type = string
}
job "web" {
  datacenters = ["dc1"]
  meta { owner = "team-a" }
  group "app" {
    count = 2
    update {
      max_parallel     = 2
      min_healthy_time = "100ms"
      healthy_deadline = "20s"
    }
    restart {
      attempts = 1
      delay    = "100ms"
    }
    task "sleeper" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = [var.sleep_for]
      }
      resources {
        cpu    = 100
        memory = 32
      }
    }
  }
}
"""


def alive(pid: int) -> bool:
    """The process really exists (signal 0 checks without touching it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@dataclass
class Cluster:
    base: str
    http: aiohttp.ClientSession
    schedulers: list[SchedulerService]
    clients: list[ClientAgent]
    nomad: nomad.Nomad

    async def get(self, path: str, **kw: Any) -> tuple[int, Any, Any]:
        async with self.http.get(self.base + path, **kw) as r:
            text = await r.text()
            body = await r.json() if r.content_type == "application/json" else text
            return r.status, body, r.headers

    async def post(self, path: str, body: Any, **kw: Any) -> tuple[int, Any, Any]:
        async with self.http.post(self.base + path, json=body, **kw) as r:
            text = await r.text()
            data = await r.json() if r.content_type == "application/json" else text
            return r.status, data, r.headers


async def until(check: Callable[[], Awaitable[Any]], limit: float = 15.0) -> Any:
    """Poll a condition until it holds or the deadline passes."""
    deadline = time.monotonic() + limit
    while True:
        got = await check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError("condition not met before the deadline")
        await asyncio.sleep(0.05)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def cluster(nats_url: str) -> AsyncIterator[Cluster]:
    import uuid

    settings = Settings(
        nats_url=nats_url,
        cluster_name="s" + uuid.uuid4().hex[:8],
        secrets_addr="127.0.0.1:0",
        workspace_addr="127.0.0.1:0",
        scheduler_addr="127.0.0.1:0",
        insecure_bus=True,  # throwaway cluster: name-derived keys (shared/service_identity.py)
    )
    buses = [await Bus.connect(nats_url, f"b{i}") for i in range(4)]
    gw = Gateway(buses[0], settings)
    await gw.start()
    # Every service and client shares this test's event loop: a heartbeat TTL of a few seconds
    # keeps a loop stalled on a loaded machine from marking the nodes down mid-test.
    scheds = [
        SchedulerService(buses[1 + i], settings, heartbeat_ttl=3.0, lease_ttl=3.0) for i in range(2)
    ]
    for s in scheds:
        await s.start()
    clients = [ClientAgent(buses[3], settings, NodeConfig(name=f"node-{i}")) for i in range(2)]
    for c in clients:
        await c.start()
    base = gw.addresses["scheduler"]
    url = urlparse(base)
    client = nomad.Nomad(host=url.hostname, port=url.port, timeout=10)
    async with aiohttp.ClientSession() as http:
        yield Cluster(base, http, scheds, clients, client)
    td = Teardown()
    for c in clients:
        await td.step(f"client {c.cfg.name} stop", c.stop())
    for s in scheds:
        await td.step(f"scheduler {s.replica_id} stop", s.stop())
    await td.step("gateway stop", gw.stop())
    for b in buses:
        await td.step(f"bus {b.name} close", b.close())
    td.finish()


async def test_new_user_flow(cluster: Cluster) -> None:
    # Parse HCL with a variable, canonicalized.
    status, job, _ = await cluster.post(
        "/v1/jobs/parse", {"JobHCL": HCL, "Canonicalize": True, "Variables": 'sleep_for = "300"'}
    )
    assert status == 200, job
    assert job["TaskGroups"][0]["Tasks"][0]["Config"]["args"] == ["300"]
    assert job["Priority"] == 50 and job["Datacenters"] == ["dc1"]

    # Register with python-nomad, submission attached through the raw body.
    resp = await asyncio.to_thread(
        cluster.nomad.jobs.register_job,
        {
            "Job": job,
            "Submission": {"Source": HCL, "Format": "hcl2", "Variables": 'sleep_for = "300"'},
        },
    )
    assert resp["EvalID"] and resp["JobModifyIndex"] > 0

    async def two_running() -> list[dict[str, Any]] | None:
        allocs = await asyncio.to_thread(cluster.nomad.job.get_allocations, "web")
        live = [a for a in allocs if a["ClientStatus"] == "running" and a["DesiredStatus"] == "run"]
        return live if len(live) == 2 else None

    live = await until(two_running)
    assert sorted(a["Name"] for a in live) == ["web.app[0]", "web.app[1]"]
    events = [e["Type"] for e in live[0]["TaskStates"]["sleeper"]["Events"]]
    assert events[:3] == ["Received", "Task Setup", "Started"]
    pids = [
        r.tasks["sleeper"].handle.pid
        for c in cluster.clients
        for r in c.runners.values()
        if not r.stopping
    ]
    assert len(pids) == 2 and all(alive(p) for p in pids)

    # The deployment succeeds and version 0 becomes stable.
    async def stable() -> bool:
        j = await asyncio.to_thread(cluster.nomad.job.get_job, "web")
        return j["Stable"]

    await until(stable)
    deps = await asyncio.to_thread(cluster.nomad.job.get_deployments, "web")
    assert deps[0]["Status"] == "successful" and deps[0]["JobVersion"] == 0

    # Change the job: version 1 with an Edited diff; its submission reads back.
    job["TaskGroups"][0]["Tasks"][0]["Config"]["args"] = ["301"]
    status, body, headers = await cluster.post(
        "/v1/jobs",
        {
            "Job": job,
            "Submission": {"Source": HCL, "Format": "hcl2", "Variables": 'sleep_for = "301"'},
        },
    )
    assert status == 200 and int(headers["X-Sched-Index"]) == body["JobModifyIndex"]
    versions = await asyncio.to_thread(
        cluster.nomad.job.request, "web", "versions", method="get", params={"diffs": "true"}
    )
    versions = versions.json()
    assert [v["Version"] for v in versions["Versions"]] == [1, 0]
    diff = versions["Diffs"][0]
    assert diff["Type"] == "Edited" and diff["TaskGroups"][0]["Tasks"][0]["Type"] == "Edited"
    status, sub, _ = await cluster.get("/v1/job/web/submission?version=1")
    assert status == 200 and sub["Source"] == HCL and sub["Variables"] == 'sleep_for = "301"'
    assert sub["Version"] == 1 and sub["JobModifyIndex"] == body["JobModifyIndex"]

    async def v1_running() -> list[dict[str, Any]] | None:
        _, allocs, _ = await cluster.get("/v1/job/web/allocations")
        live = [
            a
            for a in allocs
            if a["ClientStatus"] == "running"
            and a["DesiredStatus"] == "run"
            and a["JobVersion"] == 1
        ]
        return live if len(live) == 2 else None

    live = await until(v1_running)

    # Kill a node under the running job: its allocation is lost and placed on the other one.
    victim = next(c for c in cluster.clients if any(a["NodeID"] in c.nodes for a in live))
    survivor = next(c for c in cluster.clients if c is not victim)
    await victim.crash()

    async def rescheduled() -> list[dict[str, Any]] | None:
        _, allocs, _ = await cluster.get("/v1/job/web/allocations")
        lost = [a for a in allocs if a["ClientStatus"] == "lost"]
        live = [a for a in allocs if a["ClientStatus"] == "running" and a["DesiredStatus"] == "run"]
        if lost and len(live) == 2 and all(a["NodeID"] in survivor.nodes for a in live):
            return allocs
        return None

    allocs = await until(rescheduled, limit=20)
    replacement = next(a for a in allocs if a["RescheduleTracker"])
    assert replacement["RescheduleTracker"]["Events"][0]["PrevNodeID"] in victim.nodes
    status, node, _ = await cluster.get(f"/v1/node/{next(iter(victim.nodes))}")
    assert status == 200 and node["Status"] == "down"


async def test_python_nomad_reads(cluster: Cluster) -> None:
    jobs = await asyncio.to_thread(cluster.nomad.jobs.get_jobs)
    assert any(j["ID"] == "web" for j in jobs)
    summary = next(j for j in jobs if j["ID"] == "web")["JobSummary"]
    assert "app" in summary["Summary"]
    evals = await asyncio.to_thread(cluster.nomad.job.get_evaluations, "web")
    assert evals and all(e["JobID"] == "web" for e in evals)
    assert {"job-register", "node-update"} <= {e["TriggeredBy"] for e in evals}
    versions = await asyncio.to_thread(cluster.nomad.job.get_versions, "web")
    assert versions["Diffs"] is None and len(versions["Versions"]) >= 2
    with pytest.raises(nomad.api.exceptions.URLNotFoundNomadException):
        await asyncio.to_thread(cluster.nomad.job.get_job, "missing")
    nodes = await asyncio.to_thread(cluster.nomad.nodes.get_nodes)
    assert len(nodes) >= 2
    leader = await asyncio.to_thread(cluster.nomad.status.leader.get_leader)
    assert isinstance(leader, str)


async def test_batch_mock_pagination_filter_and_blocking(cluster: Cluster) -> None:
    for i in range(5):
        status, body, _ = await cluster.post(
            "/v1/jobs",
            {
                "Job": {
                    "ID": f"batch-{i}",
                    "Type": "batch",
                    "Datacenters": ["dc1"],
                    "Meta": {"owner": "alice" if i % 2 else "bob"},
                    "TaskGroups": [
                        {
                            "Name": "g",
                            "Tasks": [
                                {"Name": "t", "Driver": "mock", "Config": {"run_for": "10ms"}}
                            ],
                        }
                    ],
                }
            },
        )
        assert status == 200, body
    status, page, headers = await cluster.get("/v1/jobs?prefix=batch-&per_page=2")
    assert [j["ID"] for j in page] == ["batch-0", "batch-1"]
    token = headers["X-Sched-NextToken"]
    assert token == "default.batch-2"
    _, page, headers = await cluster.get(f"/v1/jobs?prefix=batch-&per_page=2&next_token={token}")
    assert [j["ID"] for j in page] == ["batch-2", "batch-3"]
    _, page, headers = await cluster.get(
        f"/v1/jobs?prefix=batch-&per_page=2&next_token={headers['X-Sched-NextToken']}"
    )
    assert [j["ID"] for j in page] == ["batch-4"] and "X-Sched-NextToken" not in headers
    _, page, _ = await cluster.get("/v1/jobs", params={"filter": 'Meta.owner == "alice"'})
    assert [j["ID"] for j in page] == ["batch-1", "batch-3"]
    _, page, _ = await cluster.get(
        "/v1/jobs", params={"namespace": "*", "meta": "true", "prefix": "batch-4"}
    )
    assert page[0]["Meta"] == {"owner": "bob"}

    async def complete() -> bool:
        _, allocs, _ = await cluster.get("/v1/job/batch-4/allocations")
        return bool(allocs) and allocs[0]["ClientStatus"] == "complete"

    await until(complete)
    # A blocking query returns once the job changes.
    _, job, headers = await cluster.get("/v1/job/batch-4")
    index = int(headers["X-Sched-Index"])
    assert headers["X-Sched-KnownLeader"] == "true" and "X-Sched-LastContact" in headers

    async def change() -> None:
        await asyncio.sleep(0.2)
        await cluster.post("/v1/jobs", {"Job": {**job, "Priority": 70}})

    started = time.monotonic()
    task = asyncio.create_task(change())
    status, changed, headers = await cluster.get(f"/v1/job/batch-4?index={index}&wait=10s")
    await task
    assert status == 200 and changed["Priority"] == 70
    assert int(headers["X-Sched-Index"]) > index and time.monotonic() - started < 5

    # Once the job settles, a blocking query without a change runs out its wait.
    async def settled() -> str | None:
        _, j, h = await cluster.get("/v1/job/batch-4")
        return h["X-Sched-Index"] if j["Status"] == "dead" else None

    quiet = await until(settled)
    started = time.monotonic()
    status, _, headers2 = await cluster.get(f"/v1/job/batch-4?index={quiet}&wait=200ms")
    assert status == 200 and headers2["X-Sched-Index"] == quiet
    assert time.monotonic() - started >= 0.2


@pytest.mark.parametrize(
    ("method", "path", "body", "code", "text"),
    [
        ("POST", "/v1/jobs", {}, 400, "Job must be specified"),
        ("POST", "/v1/jobs", {"Job": {"Datacenters": ["dc1"]}}, 400, "Job ID hasn't been provided"),
        (
            "POST",
            "/v1/jobs",
            {
                "Job": {
                    "ID": "a b",
                    "TaskGroups": [{"Name": "g", "Tasks": [{"Name": "t", "Driver": "mock"}]}],
                }
            },
            400,
            "Job ID contains a space",
        ),
        (
            "POST",
            "/v1/jobs",
            {
                "Job": {
                    "ID": "x",
                    "Type": "cron",
                    "TaskGroups": [{"Name": "g", "Tasks": [{"Name": "t", "Driver": "mock"}]}],
                }
            },
            400,
            'Invalid job type: "cron"',
        ),
        (
            "POST",
            "/v1/jobs",
            {
                "Job": {
                    "ID": "x",
                    "Priority": 101,
                    "TaskGroups": [{"Name": "g", "Tasks": [{"Name": "t", "Driver": "mock"}]}],
                }
            },
            400,
            "Job priority must be between",
        ),
        ("POST", "/v1/jobs", {"Job": {"ID": "x", "TaskGroups": "nope"}}, 400, "Failed to decode"),
        (
            "POST",
            "/v1/jobs",
            {
                "Job": {
                    "ID": "web",
                    "TaskGroups": [{"Name": "g", "Tasks": [{"Name": "t", "Driver": "mock"}]}],
                },
                "EnforceIndex": True,
                "JobModifyIndex": 0,
            },
            400,
            "Enforcing job modify index 0: job already exists",
        ),
        ("POST", "/v1/jobs/parse", {"JobHCL": ""}, 400, "Job spec is empty"),
        ("POST", "/v1/jobs/parse", {"JobHCL": 'job "x" {'}, 400, "Failed to parse job: "),
        ("POST", "/v1/jobs/parse", {"JobHCL": HCL}, 400, 'Unset variable "sleep_for"'),
        (
            "GET",
            "/v1/jobs?filter=Meta.nope%20%3D%3D%20%22x%22",
            None,
            400,
            "failed to read result page: error finding value in datum: /Meta/nope at part 1: "
            'couldn\'t find key "nope"',
        ),
        (
            "GET",
            "/v1/jobs?filter=Meta.owner%20%3D%3D",
            None,
            400,
            "failed to create result paginator: failed to read filter expression: ",
        ),
        ("GET", "/v1/jobs?index=x", None, 400, "Invalid index"),
        ("GET", "/v1/jobs?wait=forever", None, 400, "Invalid wait time"),
        ("GET", "/v1/job/missing", None, 404, "job not found"),
        (
            "GET",
            "/v1/job/web/submission",
            None,
            400,
            "Unable to parse job submission version parameter",
        ),
        ("GET", "/v1/job/web/submission?version=99", None, 404, "job source not found"),
        ("GET", "/v1/job/missing/versions", None, 404, "job versions not found"),
        ("DELETE", "/v1/jobs", None, 405, "Invalid method"),
        ("GET", "/v1/nothing", None, 404, "404 page not found"),
    ],
)
async def test_bad_input(
    cluster: Cluster, method: str, path: str, body: Any, code: int, text: str
) -> None:
    async with cluster.http.request(method, cluster.base + path, json=body) as r:
        got = await r.text()
        assert r.status == code, got
        assert r.content_type == "text/plain"
        assert text in got


async def test_missing_job_lists_are_empty(cluster: Cluster) -> None:
    for sub in ("allocations", "evaluations", "deployments"):
        status, body, _ = await cluster.get(f"/v1/job/missing/{sub}")
        assert status == 200 and body == []
