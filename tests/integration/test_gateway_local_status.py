"""sys/health, sys/seal-status and sys/leader through the gateway, answered from the state the
secrets replicas publish: the same answers the service gives, seal and unseal visible at once,
and forwarding whenever that state is missing or stale."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable

import pytest
from prometheus_client import REGISTRY

from services.gateway import local_status
from services.secrets.core.dispatch import handle_http
from shared.messages import HttpRequest
from tests.harness import Cluster, start_cluster

pytestmark = pytest.mark.nats


def _local_answers() -> float:
    return (
        REGISTRY.get_sample_value("trellis_gateway_local_answers_total", {"api": "secrets"}) or 0.0
    )


async def _until(pred: Callable[[], Awaitable[bool] | bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if await got if asyncio.iscoroutine(got) else got:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met before the deadline")


async def _published(c: Cluster) -> None:
    """Until the gateway holds a state to answer from."""
    view = c.gateway.local_status
    assert view is not None
    await _until(lambda: view.current() is not None)


async def _local(c: Cluster, path: str) -> tuple[int, dict]:
    """A GET the gateway must answer itself."""
    before = _local_answers()
    status, body = await c.request("GET", path, token="")
    assert _local_answers() == before + 1, f"{path} was forwarded"
    return status, body


async def _service(c: Cluster, path: str, query: str = "") -> tuple[int, dict]:
    """What the secrets replica itself answers."""
    core = c.secrets[0].core
    assert core is not None
    env = HttpRequest(method="GET", path=path, query=query, request_id="t")
    reply = await handle_http(core, env)
    return reply.status, json.loads(reply.body)


def _same(local: dict, service: dict) -> bool:
    drop = {"server_time_utc"}
    return {k: v for k, v in local.items() if k not in drop} == {
        k: v for k, v in service.items() if k not in drop
    }


async def test_answers_are_the_service_answers(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        await _published(c)
        for path, query in [
            ("/v1/sys/health", ""),
            ("/v1/sys/health", "standbyok=true&perfstandbyok=true"),
            ("/v1/sys/health", "activecode=299&sealedcode=204&uninitcode=204"),
            ("/v1/sys/seal-status", ""),
            ("/v1/sys/leader", ""),
        ]:
            full = path + ("?" + query if query else "")
            status, body = await _local(c, full)
            want_status, want = await _service(c, path, query)
            assert status == want_status and _same(body, want), (full, body, want)
            assert abs(body.get("server_time_utc", time.time()) - time.time()) < 5
        # Not certain what the service makes of it: forwarded, and the service words it.
        before = _local_answers()
        status, body = await c.request("GET", "/v1/sys/health?standbyok=maybe", token="")
        assert status == 400 and body["errors"] and _local_answers() == before
    finally:
        await c.close()


async def test_seal_and_unseal_are_visible_at_once(nats_url: str) -> None:
    # One replica: with more, a peer seals on the sealing replica's notice, a moment later.
    c = await start_cluster(nats_url)
    try:
        for _ in range(3):
            await _published(c)
            status, _ = await c.request("PUT", "/v1/sys/seal")
            assert status == 204
            status, body = await c.request("GET", "/v1/sys/seal-status", token="")
            assert status == 200 and body["sealed"] is True
            status, body = await c.request("GET", "/v1/sys/health", token="")
            assert status == 503 and body["sealed"] is True
            await _published(c)
            status, body = await _local(c, "/v1/sys/health")
            assert status == 503 and body["sealed"] is True and body["cluster_id"] == ""
            status, body = await c.request(
                "POST", "/v1/sys/unseal", token="", json={"key": c.unseal_keys[0]}
            )
            assert status == 200 and body["sealed"] is False
            status, body = await c.request("GET", "/v1/sys/health", token="")
            assert status == 200 and body["sealed"] is False
    finally:
        await c.close()


async def test_uninitialised_then_initialised(nats_url: str) -> None:
    c = await start_cluster(nats_url, initialize=False)
    try:
        await _published(c)
        status, body = await _local(c, "/v1/sys/health")
        assert status == 501 and body["initialized"] is False
        status, body = await _local(c, "/v1/sys/health?uninitcode=200")
        assert status == 200
        status, body = await _local(c, "/v1/sys/seal-status")
        assert body["initialized"] is False and body["sealed"] is True
        status, body = await c.request(
            "POST", "/v1/sys/init", token="", json={"secret_shares": 3, "secret_threshold": 2}
        )
        assert status == 200, body
        keys = body["keys"]
        status, body = await c.request("GET", "/v1/sys/health", token="")
        assert status == 503 and body["initialized"] is True and body["sealed"] is True
        status, body = await c.request("POST", "/v1/sys/unseal", token="", json={"key": keys[0]})
        assert body["progress"] == 1
        status, body = await c.request("GET", "/v1/sys/seal-status", token="")
        assert (body["t"], body["n"], body["progress"]) == (2, 3, 1)
        await _published(c)
        status, body = await _local(c, "/v1/sys/seal-status")
        assert (body["t"], body["n"], body["progress"], body["sealed"]) == (2, 3, 1, True)
    finally:
        await c.close()


async def test_stale_state_is_forwarded(nats_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_status, "STALE", 0.5)
    c = await start_cluster(nats_url)
    try:
        await _published(c)
        # The replica goes on serving but publishes nothing more (a stuck publisher).
        publisher = c.secrets[0].publisher
        assert publisher is not None and publisher._task is not None
        task, publisher._task = publisher._task, None
        task.cancel()
        view = c.gateway.local_status
        assert view is not None
        await _until(lambda: view.current() is None)
        before = _local_answers()
        status, body = await c.request("GET", "/v1/sys/health", token="")
        assert status == 200 and body["sealed"] is False and _local_answers() == before
    finally:
        await c.close()


async def test_a_stopped_replica_is_forgotten_at_once(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        await _published(c)
        await c.stop_secrets_replica(c.secrets[0])
        c.secrets.clear()
        status, body = await c.request("GET", "/v1/sys/health", token="")
        assert status == 503 and "no replica" in body["errors"][0]
    finally:
        await c.close()
