"""Workspace replicas agree: concurrent writers on two replicas, and a replica that starts
late from a snapshot."""

from __future__ import annotations

import asyncio
import json
import secrets

import pytest

from services.workspace.service import WorkspaceService
from shared.bus import Bus, CallContext
from shared.messages import HttpRequest
from shared.settings import Settings
from tests.integration.test_workspace_api import start_cluster

pytestmark = pytest.mark.nats


def request(admin: str, method: str, path: str, body: object = None) -> HttpRequest:
    return HttpRequest(
        method=method,
        path=path,
        headers={"authorization": f"Bearer {admin}", "content-type": "application/vnd.api+json"},
        body=b"" if body is None else json.dumps(body).encode(),
    )


async def test_two_replicas_same_name_one_201_one_422(nats_url: str, unique: str) -> None:
    admin = secrets.token_hex(16)
    gw, buses, (a, b) = await start_cluster(nats_url, unique, 2, admin)
    ctx = CallContext(subject="test")
    try:
        org = {
            "data": {
                "type": "organizations",
                "attributes": {"name": unique, "email": "o@example.com"},
            }
        }
        assert (
            await a.handle(request(admin, "POST", "/api/v2/organizations", org), ctx)
        ).status == 201
        path = f"/api/v2/organizations/{unique}/workspaces"
        for round_ in range(5):
            body = {"data": {"type": "workspaces", "attributes": {"name": f"same-{round_}"}}}
            # The same create on both replicas at the same moment: apply decides, once.
            ra, rb = await asyncio.gather(
                a.handle(request(admin, "POST", path, body), ctx),
                b.handle(request(admin, "POST", path, body), ctx),
            )
            assert sorted([ra.status, rb.status]) == [201, 422], (ra, rb)
            loser = ra if ra.status == 422 else rb
            assert json.loads(loser.body)["errors"][0]["detail"] == "Name has already been taken"
        await a.log.barrier()
        await b.log.barrier()
        for svc in (a, b):
            names = sorted(w.name for w in svc.state.workspaces.values())
            assert names == [f"same-{i}" for i in range(5)]
    finally:
        await gw.stop()
        for svc in (a, b):
            await svc.stop()
        for bus in buses:
            await bus.close()


async def test_late_replica_starts_from_snapshot(nats_url: str, unique: str) -> None:
    admin = secrets.token_hex(16)
    settings = Settings(nats_url=nats_url, cluster_name=unique, insecure_bus=True)
    bus1 = await Bus.connect(nats_url, "ws-1")
    first = WorkspaceService(bus1, settings, admin_token=admin, snapshot_every=10)
    await first.start()
    ctx = CallContext(subject="test")
    org = {
        "data": {"type": "organizations", "attributes": {"name": unique, "email": "o@example.com"}}
    }
    await first.handle(request(admin, "POST", "/api/v2/organizations", org), ctx)
    for i in range(15):
        body = {
            "data": {
                "type": "workspaces",
                "attributes": {"name": f"w{i}"},
                "relationships": {
                    "tags": {"data": [{"type": "tags", "attributes": {"name": f"t{i % 3}"}}]}
                },
            }
        }
        resp = await first.handle(
            request(admin, "POST", f"/api/v2/organizations/{unique}/workspaces", body), ctx
        )
        assert resp.status == 201
    assert first.lease is not None and first.lease.is_leader
    assert first.log is not None
    written = await first.log.snapshot_now()
    bus2 = await Bus.connect(nats_url, "ws-2")
    late = WorkspaceService(bus2, settings, admin_token=admin)
    await late.start()
    try:
        assert late.state.index == written  # restored, nothing left to replay
        assert late.snapshot_every == 1000
        assert sorted(w.name for w in late.state.workspaces.values()) == sorted(
            w.name for w in first.state.workspaces.values()
        )
        assert late.state.tag_count == first.state.tag_count
        resp = await late.handle(
            request(admin, "GET", f"/api/v2/organizations/{unique}/workspaces", None), ctx
        )
        assert json.loads(resp.body)["meta"]["pagination"]["total-count"] == 15
    finally:
        for svc in (late, first):
            await svc.stop()
        for bus in (bus1, bus2):
            await bus.close()
