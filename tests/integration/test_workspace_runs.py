"""The run state machine over HTTP, without terraform: a gateway, a secrets replica (data
keys), a workspace replica (its executor) and a scheduler replica with no client node, so
jobs are submitted and stay queued. The test plays the runner task: it reads the one-time
ticket from the job the executor submitted, redeems it, streams a log and reports results.
Queue order, the lock and current run following the run, actions, timestamps, log framing,
one-time tickets, run tokens dying with their run, and bad input (4xx, never 5xx)."""

from __future__ import annotations

import asyncio
import io
import secrets
import tarfile
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest

from services.scheduler.service import SchedulerService
from services.workspace.handlers.runs import plan_file_blob
from services.workspace.service import WorkspaceService
from shared.bus import Bus
from tests.harness import Cluster, start_cluster
from tests.integration.test_workspace_api import Api

pytestmark = pytest.mark.nats


@pytest.fixture
async def env(nats_url: str) -> AsyncIterator[tuple[Api, Cluster]]:
    cluster = await start_cluster(nats_url)
    admin = secrets.token_hex(16)
    bus = await Bus.connect(nats_url, "workspace-0")
    sbus = await Bus.connect(nats_url, "scheduler-0")
    cluster.buses += [bus, sbus]
    sched = SchedulerService(sbus, cluster.settings, lease_ttl=3.0)
    await sched.start()
    svc = WorkspaceService(bus, cluster.settings, admin_token=admin)
    await svc.start()
    cluster.extra += [svc, sched]
    async with aiohttp.ClientSession() as http:
        yield Api(cluster.workspace_url, admin, http, [svc]), cluster
    await cluster.close()


async def until(check: Callable[[], Awaitable[Any]], limit: float = 20.0) -> Any:
    deadline = asyncio.get_running_loop().time() + limit
    while True:
        got = await check()
        if got:
            return got
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.1)


def archive() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        body = b'output "x" {\n  value = "y"\n}\n'
        info = tarfile.TarInfo("main.tf")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    return buf.getvalue()


def local(url: str, base: str) -> str:
    """The path and query of an absolute URL, on the test gateway (the public address in
    these settings is unknown: the gateway picked its port)."""
    u = urlsplit(url)
    return base + u.path + (f"?{u.query}" if u.query else "")


async def config(api: Api, ws: str, **attrs: Any) -> str:
    doc = await api.ok(
        "POST",
        f"/api/v2/workspaces/{ws}/configuration-versions",
        {"data": {"type": "configuration-versions", "attributes": attrs}},
        201,
    )
    cv = doc["data"]
    assert cv["attributes"]["status"] == "pending"
    async with api.http.put(local(cv["attributes"]["upload-url"], api.base), data=archive()) as r:
        assert r.status == 200, await r.text()
    shown = await api.ok("GET", f"/api/v2/configuration-versions/{cv['id']}")
    assert shown["data"]["attributes"]["status"] == "uploaded"
    assert "upload-url" not in shown["data"]["attributes"]
    return cv["id"]


async def new_run(api: Api, ws: str, cv: str | None = None, **attrs: Any) -> dict[str, Any]:
    rels: dict[str, Any] = {"workspace": {"data": {"type": "workspaces", "id": ws}}}
    if cv:
        rels["configuration-version"] = {"data": {"type": "configuration-versions", "id": cv}}
    doc = await api.ok(
        "POST",
        "/api/v2/runs",
        {"data": {"type": "runs", "attributes": attrs, "relationships": rels}},
        201,
    )
    return doc["data"]


async def status(api: Api, run_id: str) -> str:
    return (await api.ok("GET", f"/api/v2/runs/{run_id}"))["data"]["attributes"]["status"]


async def job_env(cluster: Cluster, api: Api, job: str) -> dict[str, str]:
    async def submitted() -> Any:
        async with api.http.get(f"{cluster.scheduler_url}/v1/job/{job}") as r:
            return await r.json() if r.status == 200 else None

    doc = await until(submitted)
    return doc["TaskGroups"][0]["Tasks"][0]["Env"]


async def redeem(api: Api, run_id: str, phase: str, ticket: str) -> tuple[int, Any]:
    return await api.call(
        "POST",
        f"/api/v2/runs/{run_id}/runner/redeem",
        {"phase": phase, "ticket": ticket},
        token=None,
    )


async def test_run_state_machine(env: tuple[Api, Cluster]) -> None:
    api, cluster = env
    await api.org("acme")
    ws = (await api.workspace("acme", "app"))["id"]
    marker = f"s3cret-{secrets.token_hex(8)}"
    await api.ok(
        "POST",
        f"/api/v2/workspaces/{ws}/vars",
        {
            "data": {
                "type": "vars",
                "attributes": {"key": "pw", "value": marker, "category": "env", "sensitive": True},
            }
        },
        201,
    )
    cv = await config(api, ws, **{"auto-queue-runs": False})

    # The first run takes the workspace: plan queued, locked by the run, current run.
    first = await new_run(api, ws, cv, message="first")
    assert first["attributes"]["status"] in ("pending", "plan_queued")
    assert await until(lambda: _is(api, first["id"], "plan_queued"))
    wsdoc = (await api.ok("GET", f"/api/v2/workspaces/{ws}"))["data"]
    assert wsdoc["attributes"]["locked"] is True
    assert wsdoc["relationships"]["current-run"]["data"]["id"] == first["id"]
    assert wsdoc["relationships"]["locked-by"]["data"] == {"id": first["id"], "type": "runs"}
    # The second waits its turn (no configuration named: the newest uploaded one).
    second = await new_run(api, ws)
    assert second["relationships"]["configuration-version"]["data"]["id"] == cv
    assert second["attributes"]["status"] == "pending"
    assert second["attributes"]["position-in-queue"] == 1
    got, _ = await api.call("POST", f"/api/v2/runs/{second['id']}/actions/apply")
    assert got == 409
    runs = await api.ok("GET", f"/api/v2/workspaces/{ws}/runs", query="page%5Bsize%5D=1")
    assert [r["id"] for r in runs["data"]] == [second["id"]]  # newest first
    assert runs["meta"]["pagination"]["total-count"] == 2
    queue = await api.ok("GET", "/api/v2/organizations/acme/runs/queue")
    assert {r["id"] for r in queue["data"]} == {first["id"], second["id"]}
    cap = await api.ok("GET", "/api/v2/organizations/acme/capacity")
    assert cap["data"]["attributes"] == {"pending": 2, "running": 0}

    # The plan job: named after the run, its env holds a ticket and no variable value.
    env_ = await job_env(cluster, api, f"trellis-{first['id']}-plan")
    assert marker not in str(env_)
    ticket = env_["TRELLIS_RUN_TICKET"]
    got, _ = await redeem(api, first["id"], "plan", "x" + ticket)
    assert got == 404
    got, info = await redeem(api, first["id"], "plan", ticket)
    assert got == 200, info
    assert {"key": "pw", "value": marker, "category": "env", "hcl": False, "sensitive": True} in (
        info["variables"]
    )
    got, _ = await redeem(api, first["id"], "plan", ticket)
    assert got == 404  # one time only
    assert await status(api, first["id"]) == "planning"
    token = info["token"]
    # The plan task saves its plan file; only the run's own token may, and only the apply
    # reads it back.
    plan_file = secrets.token_bytes(64)
    plan_path = f"/api/v2/runs/{first['id']}/runner/plan-file"
    got, _ = await api.call("PUT", plan_path, raw=plan_file)
    assert got == 404  # the admin's token is not the run's
    await api.ok("PUT", plan_path, raw=plan_file, token=token, status=204)
    got, _ = await api.call("GET", plan_path, token=token)
    assert got == 404
    # The run token sees its own workspace's runs, not someone else's run.
    got, _ = await api.call("GET", f"/api/v2/runs/{second['id']}", token=token)
    assert got == 200
    await api.ok(
        "POST",
        f"/api/v2/runs/{first['id']}/runner/logs",
        raw=b"Plan: 1 to add, 0 to change, 0 to destroy.\n",
        token=token,
        query="phase=plan",
        status=204,
    )
    plan_id = first["relationships"]["plan"]["data"]["id"]
    plan = (await api.ok("GET", f"/api/v2/plans/{plan_id}"))["data"]["attributes"]
    assert plan["status"] == "running"
    log_path = local(plan["log-read-url"], api.base)
    async with api.http.get(log_path) as r:
        assert await r.read() == b"\x02Plan: 1 to add, 0 to change, 0 to destroy.\n"  # no ETX yet
    await api.ok(
        "POST",
        f"/api/v2/runs/{first['id']}/runner/result",
        {"phase": "plan", "ok": True, "has_changes": True, "counts": [1, 0, 0]},
        token=token,
    )
    assert await status(api, first["id"]) == "planned"
    plan = (await api.ok("GET", f"/api/v2/plans/{plan_id}"))["data"]["attributes"]
    assert plan["status"] == "finished" and plan["resource-additions"] == 1
    assert set(plan["status-timestamps"]) >= {"queued-at", "started-at", "finished-at"}
    async with api.http.get(log_path, params={"offset": "1", "limit": "4"}) as r:
        assert await r.read() == b"Plan"
    async with api.http.get(log_path, params={"offset": "0"}) as r:
        assert (await r.read()).endswith(b"\x03")
    shown = (await api.ok("GET", f"/api/v2/runs/{first['id']}"))["data"]["attributes"]
    assert shown["actions"]["is-confirmable"] is True and shown["has-changes"] is True
    assert set(shown["status-timestamps"]) >= {"plan-queued-at", "planning-at", "planned-at"}

    # Discard: the run ends, its token dies, the lock passes to the next run in the queue.
    await api.ok("POST", f"/api/v2/runs/{first['id']}/actions/discard", {"comment": "no"}, 202)
    assert await status(api, first["id"]) == "discarded"
    got, _ = await api.call(
        "POST",
        f"/api/v2/runs/{first['id']}/runner/logs",
        raw=b"late",
        token=token,
        query="phase=plan",
    )
    assert got == 401
    assert await until(lambda: _is(api, second["id"], "plan_queued"))
    wsdoc = (await api.ok("GET", f"/api/v2/workspaces/{ws}"))["data"]
    assert wsdoc["relationships"]["current-run"]["data"]["id"] == second["id"]

    # A speculative plan does not queue behind the current run, and never locks.
    spec_cv = await config(api, ws, speculative=True, **{"auto-queue-runs": False})
    spec = await new_run(api, ws, spec_cv)
    assert spec["attributes"]["plan-only"] is True
    assert await until(lambda: _is(api, spec["id"], "plan_queued"))
    got, _ = await api.call("POST", f"/api/v2/runs/{spec['id']}/actions/apply")
    assert got == 409

    # Cancel: the run ends, its job is stopped, the workspace unlocks.
    env2 = await job_env(cluster, api, f"trellis-{second['id']}-plan")
    await api.ok("POST", f"/api/v2/runs/{second['id']}/actions/cancel", None, 202)
    assert await status(api, second["id"]) == "canceled"
    got, _ = await redeem(api, second["id"], "plan", env2["TRELLIS_RUN_TICKET"])
    assert got == 404  # a canceled run's ticket is worthless

    async def stopped() -> bool:
        async with api.http.get(f"{cluster.scheduler_url}/v1/job/trellis-{second['id']}-plan") as r:
            return r.status == 404 or (await r.json()).get("Stop") is True

    assert await until(stopped)
    wsdoc = (await api.ok("GET", f"/api/v2/workspaces/{ws}"))["data"]
    assert wsdoc["attributes"]["locked"] is False
    assert wsdoc["relationships"]["current-run"]["data"] is None

    # An auto-apply run goes from planned to confirmed by itself; the apply job follows.
    third = await new_run(api, ws, cv, **{"auto-apply": True})
    assert await until(lambda: _is(api, third["id"], "plan_queued"))
    env3 = await job_env(cluster, api, f"trellis-{third['id']}-plan")
    _, info = await redeem(api, third["id"], "plan", env3["TRELLIS_RUN_TICKET"])
    third_plan = f"/api/v2/runs/{third['id']}/runner/plan-file"
    saved = secrets.token_bytes(300)
    got, _ = await api.call("PUT", third_plan, raw=b"", token=info["token"])
    assert got == 413
    await api.ok("PUT", third_plan, raw=saved, token=info["token"], status=204)
    await api.ok(
        "POST",
        f"/api/v2/runs/{third['id']}/runner/result",
        {"phase": "plan", "ok": True, "has_changes": True, "counts": [0, 1, 0]},
        token=info["token"],
    )
    assert await until(lambda: _is(api, third["id"], "apply_queued"))
    env4 = await job_env(cluster, api, f"trellis-{third['id']}-apply")
    got, info = await redeem(api, third["id"], "apply", env4["TRELLIS_RUN_TICKET"])
    assert got == 200
    # The apply reads exactly the plan file its plan saved; the plan's turn to save is over.
    assert await api.ok("GET", third_plan, token=info["token"]) == saved
    got, _ = await api.call("PUT", third_plan, raw=b"other", token=info["token"])
    assert got == 409
    await api.ok(
        "POST",
        f"/api/v2/runs/{third['id']}/runner/result",
        {"phase": "apply", "ok": False, "message": "terraform apply failed (exit code 1)"},
        token=info["token"],
    )
    done = (await api.ok("GET", f"/api/v2/runs/{third['id']}"))["data"]["attributes"]
    assert done["status"] == "errored"

    async def plan_file_gone() -> bool:  # it holds variable values: kept no longer than the run
        return await api.services[0].blobs.get(plan_file_blob(third["id"])) is None

    assert await until(plan_file_gone)
    assert done["error-message"] == "terraform apply failed (exit code 1)"
    assert (await api.ok("GET", f"/api/v2/workspaces/{ws}"))["data"]["attributes"][
        "locked"
    ] is False

    # Cancel of a running plan interrupts its task (the job is stopped: SIGINT to terraform);
    # the run keeps the workspace until the task reports, then it is canceled.
    fourth = await new_run(api, ws, cv)
    assert await until(lambda: _is(api, fourth["id"], "plan_queued"))
    env5 = await job_env(cluster, api, f"trellis-{fourth['id']}-plan")
    _, info = await redeem(api, fourth["id"], "plan", env5["TRELLIS_RUN_TICKET"])
    await api.ok("POST", f"/api/v2/runs/{fourth['id']}/actions/cancel", None, 202)
    shown = (await api.ok("GET", f"/api/v2/runs/{fourth['id']}"))["data"]["attributes"]
    assert shown["status"] == "planning" and shown["actions"]["is-cancelable"] is False
    got, _ = await api.call("POST", f"/api/v2/runs/{fourth['id']}/actions/cancel")
    assert got == 409

    async def interrupted() -> bool:
        async with api.http.get(f"{cluster.scheduler_url}/v1/job/trellis-{fourth['id']}-plan") as r:
            return r.status == 200 and (await r.json()).get("Stop") is True

    assert await until(interrupted)
    wsdoc = (await api.ok("GET", f"/api/v2/workspaces/{ws}"))["data"]
    assert wsdoc["relationships"]["current-run"]["data"]["id"] == fourth["id"]
    await api.ok(
        "POST",
        f"/api/v2/runs/{fourth['id']}/runner/result",
        {"phase": "plan", "ok": False, "message": "the plan was canceled"},
        token=info["token"],
    )
    assert await status(api, fourth["id"]) == "canceled"
    assert (await api.ok("GET", f"/api/v2/workspaces/{ws}"))["data"]["attributes"][
        "locked"
    ] is False

    # A configuration uploaded with auto-queue-runs (the default) queues a run by itself; the
    # workspace lists its configuration versions newest first.
    auto_cv = await config(api, ws)
    runs = (await api.ok("GET", f"/api/v2/workspaces/{ws}/runs"))["data"]
    assert runs[0]["relationships"]["configuration-version"]["data"]["id"] == auto_cv
    assert runs[0]["id"] not in {first["id"], second["id"], third["id"], fourth["id"], spec["id"]}
    assert await until(lambda: _is(api, runs[0]["id"], "plan_queued"))
    cvs = (await api.ok("GET", f"/api/v2/workspaces/{ws}/configuration-versions"))["data"]
    assert [c["id"] for c in cvs] == [auto_cv, spec_cv, cv]
    assert [c["attributes"]["auto-queue-runs"] for c in cvs] == [True, False, False]


async def _is(api: Api, run_id: str, want: str) -> bool:
    return await status(api, run_id) == want


async def test_bad_input(env: tuple[Api, Cluster]) -> None:
    api, _ = env
    await api.org("acme")
    ws = (await api.workspace("acme", "app"))["id"]
    local_ws = (await api.workspace("acme", "lab", **{"execution-mode": "local"}))["id"]
    doc = await api.ok(
        "POST",
        f"/api/v2/workspaces/{ws}/configuration-versions",
        {"data": {"type": "configuration-versions"}},
        201,
    )
    url = local(doc["data"]["attributes"]["upload-url"], api.base)
    async with api.http.put(url, data=b"not a tarball") as r:
        assert r.status == 422 and "tar.gz" in await r.text()
    cv = await api.ok("GET", f"/api/v2/configuration-versions/{doc['data']['id']}")
    assert cv["data"]["attributes"]["status"] == "errored"
    async with api.http.put(url, data=archive()) as r:
        assert r.status == 404  # the upload URL worked once
    cases: list[tuple[str, str, Any, int]] = [
        ("POST", "/api/v2/runs", {"data": {"type": "runs"}}, 422),
        ("POST", "/api/v2/runs", {"data": {"type": "nope"}}, 422),
        (
            "POST",
            "/api/v2/runs",
            {
                "data": {
                    "type": "runs",
                    "attributes": {"is-destroy": "yes"},
                    "relationships": {"workspace": {"data": {"type": "workspaces", "id": ws}}},
                }
            },
            422,
        ),
        (
            "POST",
            "/api/v2/runs",
            {
                "data": {
                    "type": "runs",
                    "relationships": {"workspace": {"data": {"type": "workspaces", "id": ws}}},
                }
            },
            422,  # no uploaded configuration
        ),
        (
            "POST",
            "/api/v2/runs",
            {
                "data": {
                    "type": "runs",
                    "relationships": {
                        "workspace": {"data": {"type": "workspaces", "id": local_ws}}
                    },
                }
            },
            422,
        ),
        ("POST", "/api/v2/runs/run-nope/actions/apply", None, 404),
        ("POST", "/api/v2/runs/run-nope/actions/explode", None, 404),
        ("GET", "/api/v2/plans/apply-x", None, 404),
        ("GET", "/api/v2/plans/plan-x/logs/abc", None, 404),
        ("POST", "/api/v2/runs/run-x/runner/redeem", {"phase": "plan"}, 404),
        ("POST", "/api/v2/runs/run-x/runner/redeem", {"phase": "lunch", "ticket": "t"}, 422),
        ("POST", "/api/v2/runs/run-x/runner/redeem", [1], 422),
        ("POST", "/api/v2/runs/run-x/runner/result", {"phase": "plan"}, 404),
        ("GET", "/api/v2/workspaces/ws-nope/runs", None, 404),
        ("GET", "/api/v2/configuration-versions/cv-nope", None, 404),
    ]
    for method, path, body, want in cases:
        got, err = await api.call(method, path, body)
        assert got == want, (method, path, got, err)
