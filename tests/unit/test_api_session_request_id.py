"""The request id of a sealed envelope: it crosses the bus inside the box (no bus header), and the
replica binds it for the handler's log lines, for a late (Deferred) answer too; an envelope
that opens but does not decode is answered sealed, so the gateway does not take it for an
impostor's reply."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest
import structlog

from shared.api_session import SessionClient
from shared.bus import CallContext
from shared.cluster_identity import ClusterIdentity
from shared.deferred import Deferred
from shared.errors import ServiceError
from shared.messages import HttpRequest, HttpResponse
from tests.unit.test_api_session import FakeBus, client_for, replica


def _logged_request_id() -> Any:
    return structlog.contextvars.get_contextvars().get("request_id")


def _client(handler: Any) -> tuple[FakeBus, SessionClient]:
    identity = ClusterIdentity.from_seed(os.urandom(32))
    bus = FakeBus(replica(identity, handler=handler))
    return bus, client_for(bus, identity)


async def test_the_sealed_request_id_is_bound_for_the_handler() -> None:
    seen: list[tuple[str, Any]] = []

    async def handler(req: HttpRequest, ctx: CallContext) -> HttpResponse:
        seen.append((ctx.request_id, _logged_request_id()))
        return HttpResponse(status=200)

    bus, client = _client(handler)
    rid = f"rid-{os.urandom(4).hex()}"
    env = HttpRequest(method="GET", path="/v1/x", request_id=rid)
    await client.call(env, timeout=1, request_id=rid)
    assert seen == [(rid, rid)]
    assert _logged_request_id() is None  # bound for the handler only
    assert not any(rid.encode() in w for w in bus.wire)

    await client.call(HttpRequest(method="GET", path="/v1/x"), timeout=1)
    assert seen[-1] == ("", None)


async def test_a_late_answer_is_logged_under_its_request_id() -> None:
    ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    seen: list[Any] = []

    async def handler(req: HttpRequest, _ctx: CallContext) -> Deferred:
        async def finish() -> HttpResponse:
            seen.append(_logged_request_id())
            return HttpResponse(status=200)

        return Deferred(ready, finish)

    _, client = _client(handler)
    asyncio.get_running_loop().call_soon(ready.set_result, None)
    rid = f"late-{os.urandom(4).hex()}"
    await client.call(HttpRequest(method="GET", path="/v1/x", request_id=rid), timeout=1)
    assert seen == [rid]


async def test_an_envelope_that_does_not_decode_is_refused_sealed() -> None:
    async def handler(req: HttpRequest, _ctx: CallContext) -> HttpResponse:
        raise AssertionError("never reached")

    _, client = _client(handler)
    with pytest.raises(ServiceError) as err:
        await client._exchange(client.subject, {"not": "an envelope"}, "", timeout=1)
    assert (err.value.code, err.value.message) == (400, "malformed envelope")
