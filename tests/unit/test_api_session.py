"""The gateway <-> service sessions (shared/api_session.py) without NATS: a fake bus routes the
gateway's requests to a replica's handlers, or to an impostor's (another cluster's, or another
service's of the same cluster)."""

from __future__ import annotations

import os
from typing import Any

import msgspec
import pytest

from shared import api_session
from shared.api_session import SealedReply, SealedRequest, SessionClient, SessionServer
from shared.bus import CallContext
from shared.cluster_identity import ClusterIdentity
from shared.deferred import Deferred
from shared.errors import ServiceError
from shared.messages import HttpRequest, HttpResponse
from shared.service_identity import derive_service_key

SUBJECT = "c.api.secrets"


class FakeBus:
    """Routes by subject to handlers; records what crossed it."""

    def __init__(self, routes: dict[str, Any]) -> None:
        self.routes = routes
        self.wire: list[bytes] = []

    async def request(self, subject: str, message: Any, reply_type: Any, **_: Any) -> Any:
        data = msgspec.msgpack.encode(message)
        self.wire.append(data)
        handler, kind = self.routes[subject]
        reply = await handler(msgspec.msgpack.decode(data, type=kind), CallContext(subject))
        while isinstance(reply, Deferred):  # what the bus does with a parked reply
            await reply.ready
            reply = await reply.finish()
        out = msgspec.msgpack.encode(reply)
        self.wire.append(out)
        return msgspec.msgpack.decode(out, type=reply_type)


async def echo_token(req: HttpRequest, _ctx: CallContext) -> HttpResponse:
    return HttpResponse(status=200, body=req.headers["x-vault-token"].encode())


def replica(identity: ClusterIdentity, service: str = "secrets", handler: Any = None) -> dict:
    """A replica holding `service`'s key, answering on the secrets subject."""
    server = SessionServer(derive_service_key(identity, service), "c")
    return {
        SUBJECT + ".session": (server.handshake, api_session.SessionHello),
        SUBJECT: (server.serve(handler or echo_token), SealedRequest),
    }


def client_for(bus: Any, identity: ClusterIdentity, service: str = "secrets") -> SessionClient:
    return SessionClient(bus, "c", service, SUBJECT, identity.public_key)


def env(token: str = "hvs.secret-token") -> HttpRequest:
    return HttpRequest(method="GET", path="/v1/x", headers={"x-vault-token": token})


async def test_round_trip_is_sealed_and_any_replica_opens_the_ticket() -> None:
    identity = ClusterIdentity.from_seed(os.urandom(32))
    first, second = replica(identity), replica(identity)
    bus = FakeBus(first)
    client = client_for(bus, identity)
    assert (await client.call(env(), timeout=1)).body == b"hvs.secret-token"
    bus.routes = second  # another replica of the queue group, same session
    assert (await client.call(env(), timeout=1)).body == b"hvs.secret-token"
    assert not any(b"hvs.secret-token" in w for w in bus.wire)


async def test_an_impostor_replica_cannot_complete_a_handshake_or_answer() -> None:
    genuine = ClusterIdentity.from_seed(os.urandom(32))
    impostor = ClusterIdentity.from_seed(os.urandom(32))
    client = client_for(FakeBus(replica(impostor)), genuine)
    with pytest.raises(ServiceError) as err:
        await client.call(env(), timeout=1)
    assert err.value.code == 502

    # A session with the genuine cluster, then an impostor answers in its place.
    bus = FakeBus(replica(genuine))
    client = client_for(bus, genuine)
    await client.call(env(), timeout=1)

    async def forge(req: SealedRequest, _ctx: CallContext) -> SealedReply:
        return SealedReply(box=os.urandom(64))

    bus.routes[SUBJECT] = (forge, SealedRequest)
    with pytest.raises(ServiceError) as err:
        await client.call(env(), timeout=1)
    assert err.value.code == 502


async def test_replayed_and_expired_requests_are_refused() -> None:
    identity = ClusterIdentity.from_seed(os.urandom(32))
    routes = replica(identity)
    bus = FakeBus(routes)
    client = client_for(bus, identity)
    await client.call(env(), timeout=1)
    captured = msgspec.msgpack.decode(bus.wire[-2], type=SealedRequest)
    handler = routes[SUBJECT][0]
    with pytest.raises(ServiceError, match="replayed"):
        await handler(captured, CallContext(SUBJECT))
    # A new replica process that never saw the ticket refuses it once it has expired.
    other = SessionServer(derive_service_key(identity, "secrets"), "c")
    other_handler = other.serve(echo_token)
    session = other._session(captured.ticket, 0.0)
    session.expires = 0.0
    with pytest.raises(ServiceError) as err:
        await other_handler(captured, CallContext(SUBJECT))
    assert err.value.code == api_session.SESSION_REFUSED


async def test_sessions_rotate() -> None:
    identity = ClusterIdentity.from_seed(os.urandom(32))
    client = client_for(FakeBus(replica(identity)), identity)
    await client.call(env(), timeout=1)
    first = client._session
    assert first is not None
    first.counter = api_session.ROTATE_COUNT
    await client.call(env(), timeout=1)
    assert client._session is not first


async def test_a_replica_of_another_service_cannot_answer_for_this_one() -> None:
    """Same cluster, genuine certificate, wrong service: the workspace key does not make a
    secrets replica, nor the secrets key a workspace one."""
    identity = ClusterIdentity.from_seed(os.urandom(32))
    for holder, asked in (
        ("workspace", "secrets"),
        ("scheduler", "workspace"),
        ("secrets", "scheduler"),
    ):
        client = client_for(FakeBus(replica(identity, holder)), identity, asked)
        with pytest.raises(ServiceError) as err:
            await client.call(env(), timeout=1)
        assert err.value.code == 502
    ok = client_for(FakeBus(replica(identity, "workspace")), identity, "workspace")
    assert (await ok.call(env(), timeout=1)).body == b"hvs.secret-token"


async def test_a_deferred_reply_is_sealed_when_it_is_built() -> None:
    """A blocking query answers later (shared/deferred.py): the late answer is sealed too."""
    import asyncio

    identity = ClusterIdentity.from_seed(os.urandom(32))
    ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def later(req: HttpRequest, _ctx: CallContext) -> Deferred:
        async def finish() -> HttpResponse:
            return HttpResponse(status=200, body=b"late:" + req.headers["x-vault-token"].encode())

        return Deferred(ready, finish)

    bus = FakeBus(replica(identity, "scheduler", later))
    client = client_for(bus, identity, "scheduler")
    asyncio.get_running_loop().call_later(0.01, ready.set_result, None)
    assert (await client.call(env(), timeout=1)).body == b"late:hvs.secret-token"
    assert not any(b"hvs.secret-token" in w for w in bus.wire)
