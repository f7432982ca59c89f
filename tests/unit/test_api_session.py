"""The gateway <-> secrets session (shared/api_session.py) without NATS: a fake bus routes the
gateway's requests to a replica's handlers, or to an impostor's."""

from __future__ import annotations

import os
from typing import Any

import msgspec
import pytest

from shared import api_session
from shared.api_session import SealedReply, SealedRequest, SessionClient, SessionServer
from shared.bus import CallContext
from shared.cluster_identity import ClusterIdentity
from shared.errors import ServiceError
from shared.messages import HttpRequest, HttpResponse

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
        out = msgspec.msgpack.encode(reply)
        self.wire.append(out)
        return msgspec.msgpack.decode(out, type=reply_type)


async def echo_token(req: HttpRequest, _ctx: CallContext) -> HttpResponse:
    return HttpResponse(status=200, body=req.headers["x-vault-token"].encode())


def replica(identity: ClusterIdentity) -> dict[str, Any]:
    server = SessionServer(identity, "c")
    return {
        SUBJECT + ".session": (server.handshake, api_session.SessionHello),
        SUBJECT: (server.serve(echo_token), SealedRequest),
    }


def env(token: str = "hvs.secret-token") -> HttpRequest:
    return HttpRequest(method="GET", path="/v1/x", headers={"x-vault-token": token})


async def test_round_trip_is_sealed_and_any_replica_opens_the_ticket() -> None:
    identity = ClusterIdentity.from_seed(os.urandom(32))
    first, second = replica(identity), replica(identity)
    bus = FakeBus(first)
    client = SessionClient(bus, "c", SUBJECT, identity.public_key)  # type: ignore[arg-type]
    assert (await client.call(env(), timeout=1)).body == b"hvs.secret-token"
    bus.routes = second  # another replica of the queue group, same session
    assert (await client.call(env(), timeout=1)).body == b"hvs.secret-token"
    assert not any(b"hvs.secret-token" in w for w in bus.wire)


async def test_an_impostor_replica_cannot_complete_a_handshake_or_answer() -> None:
    genuine = ClusterIdentity.from_seed(os.urandom(32))
    impostor = ClusterIdentity.from_seed(os.urandom(32))
    client = SessionClient(FakeBus(replica(impostor)), "c", SUBJECT, genuine.public_key)  # type: ignore[arg-type]
    with pytest.raises(ServiceError) as err:
        await client.call(env(), timeout=1)
    assert err.value.code == 502

    # A session with the genuine cluster, then an impostor answers in its place.
    bus = FakeBus(replica(genuine))
    client = SessionClient(bus, "c", SUBJECT, genuine.public_key)  # type: ignore[arg-type]
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
    client = SessionClient(bus, "c", SUBJECT, identity.public_key)  # type: ignore[arg-type]
    await client.call(env(), timeout=1)
    captured = msgspec.msgpack.decode(bus.wire[-2], type=SealedRequest)
    handler = routes[SUBJECT][0]
    with pytest.raises(ServiceError, match="replayed"):
        await handler(captured, CallContext(SUBJECT))
    # A new replica process that never saw the ticket refuses it once it has expired.
    other = SessionServer(identity, "c")
    other_handler = other.serve(echo_token)
    session = other._session(captured.ticket, 0.0)
    session.expires = 0.0
    with pytest.raises(ServiceError) as err:
        await other_handler(captured, CallContext(SUBJECT))
    assert err.value.code == api_session.SESSION_REFUSED


async def test_sessions_rotate() -> None:
    identity = ClusterIdentity.from_seed(os.urandom(32))
    client = SessionClient(FakeBus(replica(identity)), "c", SUBJECT, identity.public_key)  # type: ignore[arg-type]
    await client.call(env(), timeout=1)
    first = client._session
    assert first is not None
    first.counter = api_session.ROTATE_COUNT
    await client.call(env(), timeout=1)
    assert client._session is not first
