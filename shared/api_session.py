"""End-to-end encryption of API envelopes between the gateway and a service's replicas (secrets,
workspace, scheduler: one code path, parametrised by the service's name and key).

Handshake (once per gateway session and service, on `{cluster}.api.<service>.session`): the
gateway sends an ephemeral X25519 public key and a nonce; a replica answers with its own
ephemeral key, a ticket, an expiry, its service key and certificate (shared/service_identity.py:
the cluster key's signature over the service name and key), and a signature over all of it by
that service key. The gateway pins the cluster public key and accepts only a certificate for
the service it asked for, so a workspace replica cannot answer for the secrets service. Both
derive the session key from the X25519 secret (HKDF). The ticket is the session key sealed
under the service's ticket key, so whichever replica of the queue group receives a request can
open it; an impostor subscriber cannot.

Per message: the request carries the ticket, a counter, and the envelope sealed with AES-GCM
under the session key (nonce = direction + counter, so never reused); the reply is sealed with
the same key and the reply-direction nonce of that counter, so it opens only as the answer to
that request. Replicas reject stale requests and counters they have already seen. The gateway
starts a new session after ROTATE_AFTER seconds or ROTATE_COUNT messages; replicas refuse a
ticket after TICKET_LIFETIME. docs/bus-security.md has the argument.
"""

from __future__ import annotations

import asyncio
import os
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec
import structlog
from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from structlog.contextvars import bind_contextvars, reset_contextvars

from shared.bus import Bus, CallContext, decoder_for
from shared.deferred import Deferred
from shared.errors import BusTimeout, NoResponders, ServiceError
from shared.messages import HttpRequest, HttpResponse
from shared.service_identity import ServiceKey, verify_service
from shared.subjects import Subject

log = structlog.get_logger("api_session")

PROTOCOL = b"trellis api session v2"
TICKET_LIFETIME = 900.0
ROTATE_AFTER = 600.0  # well before the ticket expires, so rotation never costs a refusal
ROTATE_COUNT = 1 << 28
MAX_SKEW = 120.0  # seconds a request may be old (or early) when a replica opens it
REPLAY_WINDOW = 4096  # counters accepted out of order per session and replica
HANDSHAKE_TIMEOUT = 5.0
HANDSHAKE_TRIES = 6
UNAUTHENTIC_TRIES = 4  # sends of one request while the replies do not open
# A plain (unsealed) error the secrets side sends when it cannot open a ticket: the gateway
# answers it with a new handshake, never by trusting anything else in it.
SESSION_REFUSED = 440
_TS = struct.Struct(">d")


class SessionHello(msgspec.Struct, kw_only=True):
    gateway_public: bytes
    nonce: bytes


class SessionAccept(msgspec.Struct, kw_only=True):
    replica_public: bytes
    ticket: bytes
    expires: float
    service_public: bytes  # the service's certified Ed25519 key
    certificate: bytes  # the cluster key's signature over the service name and that key
    signature: bytes  # by the service key, over the transcript


class SealedRequest(msgspec.Struct, kw_only=True):
    ticket: bytes
    counter: int
    box: bytes


class SealedReply(msgspec.Struct, kw_only=True):
    box: bytes


class ApiReply(msgspec.Struct, kw_only=True):
    response: HttpResponse | None = None  # the HTTP API's answer
    body: bytes = b""  # an RPC channel's answer, msgpack of its reply type
    code: int = 0
    message: str = ""


T = TypeVar("T")
_request_enc = msgspec.msgpack.Encoder()
_request_dec = msgspec.msgpack.Decoder(HttpRequest)
_reply_dec = msgspec.msgpack.Decoder(ApiReply)


def _nonce(direction: int, counter: int) -> bytes:
    return (direction << 88 | counter).to_bytes(12, "big")


def _aad(cluster: str, service: str, direction: bytes, channel: str = "") -> bytes:
    """Binds a box to its cluster, service, direction and channel ("" for the HTTP API, the
    RPC name otherwise), so a box made for one channel never opens on another."""
    if channel:
        direction += b":" + channel.encode()
    return b"\x00".join((PROTOCOL, cluster.encode(), service.encode(), direction))


def _transcript(cluster: str, service: str, hello: SessionHello, accept: SessionAccept) -> bytes:
    return b"\x00".join(
        (
            PROTOCOL,
            cluster.encode(),
            service.encode(),
            accept.service_public,
            hello.gateway_public,
            hello.nonce,
            accept.replica_public,
            accept.ticket,
            _TS.pack(accept.expires),
        )
    )


def _session_key(
    shared: bytes, cluster: str, service: str, hello: SessionHello, replica_public: bytes
) -> bytes:
    info = b"\x00".join(
        (PROTOCOL, cluster.encode(), service.encode(), hello.gateway_public, replica_public)
    )
    return HKDF(hashes.SHA256(), 32, salt=hello.nonce, info=info).derive(shared)


# ---- the gateway's side ----------------------------------------------------------------------


@dataclass
class _ClientSession:
    aead: AESGCM
    ticket: bytes
    started: float
    counter: int = 0

    def due(self, now: float) -> bool:
        return now - self.started > ROTATE_AFTER or self.counter >= ROTATE_COUNT


class SessionClient:
    """The gateway's encrypted channel to `service`, certified by the cluster key `public_key`
    pins. `batch`: HTTP envelopes travel micro-batched (shared/bus_batch.py), each sealed on
    its own."""

    def __init__(
        self,
        bus: Bus,
        cluster: str,
        service: str,
        subject: str,
        public_key: Ed25519PublicKey,
        *,
        batch: bool = False,
    ) -> None:
        self.bus = bus
        self.batch = batch
        self.cluster = cluster
        self.service = service
        self.subject = subject
        self.handshake_subject = subject + ".session"
        self.public_key = public_key
        self._session: _ClientSession | None = None
        self._lock = asyncio.Lock()
        self._req_aad = _aad(cluster, service, b"req")
        self._rep_aad = _aad(cluster, service, b"rep")

    async def session(self) -> _ClientSession:
        s = self._session
        if s is not None and not s.due(time.monotonic()):
            return s
        async with self._lock:  # one handshake at a time; the others wait for its result
            s = self._session
            if s is None or s.due(time.monotonic()):
                s = self._session = await self._handshake()
            return s

    def forget(self, s: _ClientSession) -> None:
        if self._session is s:
            self._session = None

    async def _handshake(self) -> _ClientSession:
        """Try until a replica proves it holds the service key the cluster key certified for
        this service; impostors' answers are dropped (the queue group may hand the next try to
        a genuine replica)."""
        for _ in range(HANDSHAKE_TRIES):
            private = X25519PrivateKey.generate()
            hello = SessionHello(
                gateway_public=private.public_key().public_bytes_raw(), nonce=os.urandom(16)
            )
            try:
                accept = await self.bus.request(
                    self.handshake_subject, hello, SessionAccept, timeout=HANDSHAKE_TIMEOUT
                )
                service_key = verify_service(
                    self.public_key, self.service, accept.service_public, accept.certificate
                )
                service_key.verify(
                    accept.signature, _transcript(self.cluster, self.service, hello, accept)
                )
                shared = private.exchange(X25519PublicKey.from_public_bytes(accept.replica_public))
            except (NoResponders, BusTimeout):
                raise
            except (ServiceError, InvalidSignature, ValueError, msgspec.DecodeError) as exc:
                log.warning("session handshake refused", reason=type(exc).__name__)
                continue
            key = _session_key(shared, self.cluster, self.service, hello, accept.replica_public)
            return _ClientSession(AESGCM(key), accept.ticket, time.monotonic())
        raise ServiceError(502, f"no genuine {self.service} replica answered the session handshake")

    async def call(
        self, env: HttpRequest, *, timeout: float, request_id: str = "", caller: str = ""
    ) -> HttpResponse:
        """Send one HTTP envelope sealed and open the reply. The caller is the gateway
        (implied); the request id is `env`'s, inside the box."""
        reply = await self._exchange(self.subject, env, "", timeout=timeout, request_id=request_id)
        assert reply.response is not None
        return reply.response

    async def request(
        self, subject: str, message: Any, reply_type: type[T], *, channel: str, timeout: float
    ) -> T:
        """An RPC to the same service on `subject` (e.g. a client node's calls to the
        scheduler), sealed under this session and bound to `channel`."""
        reply = await self._exchange(subject, message, channel, timeout=timeout)
        return decoder_for(reply_type).decode(reply.body)

    async def publish(self, subject: str, message: Any, *, channel: str) -> None:
        """A sealed one-way message (no reply awaited) on `subject`."""
        s = await self.session()
        s.counter += 1
        plain = _TS.pack(time.time()) + _request_enc.encode(message)
        box = s.aead.encrypt(_nonce(0, s.counter), plain, self._aad("req", channel))
        await self.bus.publish(subject, SealedRequest(ticket=s.ticket, counter=s.counter, box=box))

    def _aad(self, direction: str, channel: str) -> bytes:
        if not channel:
            return self._req_aad if direction == "req" else self._rep_aad
        return _aad(self.cluster, self.service, direction.encode(), channel)

    async def _exchange(
        self,
        subject: str,
        message: Any,
        channel: str,
        *,
        timeout: float,
        request_id: str = "",
    ) -> ApiReply:
        """Send one message sealed and open the reply. A reply that does not open came from
        no genuine replica (they seal every answer once they opened a request), so the
        request never reached the service: it is sent again, and a 502 after UNAUTHENTIC_TRIES."""
        plain = _TS.pack(time.time()) + _request_enc.encode(message)
        req_aad, rep_aad = self._aad("req", channel), self._aad("rep", channel)
        batch = self.batch and not channel  # only the API subject is served batched
        refused = False
        for _ in range(UNAUTHENTIC_TRIES):
            s = await self.session()
            s.counter += 1
            counter = s.counter
            req = SealedRequest(
                ticket=s.ticket,
                counter=counter,
                box=s.aead.encrypt(_nonce(0, counter), plain, req_aad),
            )
            try:
                # No bus headers: the request id travels inside the envelope, sealed.
                sealed = await self.bus.request(
                    subject, req, SealedReply, timeout=timeout, batch=batch
                )
                reply = _reply_dec.decode(s.aead.decrypt(_nonce(1, counter), sealed.box, rep_aad))
            except (NoResponders, BusTimeout):
                raise
            except ServiceError as exc:
                # Unsealed, so unauthenticated: at most worth a new session, never believed.
                if exc.code == SESSION_REFUSED and not refused:
                    refused = True
                    self.forget(s)
                log.warning(
                    "unauthenticated reply on the API subject",
                    service=self.service,
                    request_id=request_id,
                )
                continue
            except (InvalidTag, msgspec.DecodeError):
                log.warning(
                    "unauthenticated reply on the API subject",
                    service=self.service,
                    request_id=request_id,
                )
                continue
            if reply.code:
                raise ServiceError(reply.code, reply.message)
            return reply
        raise ServiceError(502, f"the {self.service} service's reply could not be authenticated")


# ---- the service replicas' side ------------------------------------------------------------


@dataclass
class _ServerSession:
    aead: AESGCM
    expires: float
    top: int = 0
    seen: set[int] = field(default_factory=set)

    def fresh(self, counter: int) -> bool:
        """Sliding-window replay check (as IPsec's): each counter once, a little disorder."""
        if counter <= self.top - REPLAY_WINDOW or counter in self.seen:
            return False
        self.seen.add(counter)
        if counter > self.top:
            self.top = counter
            if len(self.seen) > 2 * REPLAY_WINDOW:
                floor = self.top - REPLAY_WINDOW
                self.seen = {c for c in self.seen if c > floor}
        return True


class SessionRefused(ServiceError):
    def __init__(self, why: str) -> None:
        super().__init__(SESSION_REFUSED, why)


ApiHandler = Callable[[HttpRequest, CallContext], Awaitable[HttpResponse | Deferred]]


class SessionServer:
    """A service replica's side: answers handshakes, opens requests, seals replies."""

    MAX_SESSIONS = 4096

    def __init__(self, key: ServiceKey, cluster: str) -> None:
        self.key = key
        self.cluster = cluster
        service = key.service
        self._tickets = AESGCM(key.ticket_key)
        self._ticket_aad = _aad(cluster, service, b"ticket")
        self._req_aad = _aad(cluster, service, b"req")
        self._rep_aad = _aad(cluster, service, b"rep")
        self._sessions: dict[bytes, _ServerSession] = {}

    async def handshake(self, hello: SessionHello, _ctx: CallContext) -> SessionAccept:
        if len(hello.gateway_public) != 32 or len(hello.nonce) != 16:
            raise ServiceError(400, "malformed session handshake")
        private = X25519PrivateKey.generate()
        replica_public = private.public_key().public_bytes_raw()
        shared = private.exchange(X25519PublicKey.from_public_bytes(hello.gateway_public))
        service = self.key.service
        key = _session_key(shared, self.cluster, service, hello, replica_public)
        expires = time.time() + TICKET_LIFETIME
        nonce = os.urandom(12)
        ticket = nonce + self._tickets.encrypt(nonce, key + _TS.pack(expires), self._ticket_aad)
        accept = SessionAccept(
            replica_public=replica_public,
            ticket=ticket,
            expires=expires,
            service_public=self.key.public,
            certificate=self.key.certificate,
            signature=b"",
        )
        transcript = _transcript(self.cluster, service, hello, accept)
        accept.signature = self.key.signing_key.sign(transcript)
        return accept

    def _session(self, ticket: bytes, now: float) -> _ServerSession:
        s = self._sessions.get(ticket)
        if s is None:
            try:
                plain = self._tickets.decrypt(ticket[:12], ticket[12:], self._ticket_aad)
            except (InvalidTag, ValueError):
                raise SessionRefused("unknown session ticket") from None
            (expires,) = _TS.unpack(plain[32:])
            s = _ServerSession(AESGCM(plain[:32]), expires)
            if len(self._sessions) >= self.MAX_SESSIONS:
                self._sessions.pop(next(iter(self._sessions)))
            self._sessions[ticket] = s
        if now > s.expires:
            self._sessions.pop(ticket, None)
            raise SessionRefused("expired session ticket")
        return s

    def serve(
        self, handler: Any, request_type: Any = HttpRequest, *, channel: str = ""
    ) -> Callable[[SealedRequest, CallContext], Awaitable[SealedReply | Deferred]]:
        """Wrap a handler: open the request, run it, seal whatever it answers. The HTTP API
        (the default) answers HttpResponse; an RPC channel (`channel` set) answers any
        msgspec value of its own. A Deferred answer (a blocking query, shared/deferred.py)
        stays deferred and is sealed when it is finally built, under the same counter's reply
        nonce."""
        cluster, service = self.cluster, self.key.service
        req_aad = _aad(cluster, service, b"req", channel) if channel else self._req_aad
        rep_aad = _aad(cluster, service, b"rep", channel) if channel else self._rep_aad
        request_dec = _request_dec if request_type is HttpRequest else decoder_for(request_type)

        def seal(s: _ServerSession, counter: int, reply: ApiReply) -> SealedReply:
            box = s.aead.encrypt(_nonce(1, counter), _request_enc.encode(reply), rep_aad)
            return SealedReply(box=box)

        def failed(exc: Exception) -> ApiReply:
            if isinstance(exc, ServiceError):
                return ApiReply(code=exc.code, message=exc.message)
            if isinstance(exc, msgspec.DecodeError):
                return ApiReply(code=400, message="malformed envelope")
            log.exception("handler failed", service=self.key.service)
            return ApiReply(code=500, message="internal error")

        def answered(
            s: _ServerSession, counter: int, ctx: CallContext, result: Any
        ) -> SealedReply | Deferred:
            if isinstance(result, Deferred):
                later = result.finish
                return Deferred(result.ready, lambda: finish(s, counter, ctx, later))
            if channel:
                return seal(s, counter, ApiReply(body=_request_enc.encode(result)))
            return seal(s, counter, ApiReply(response=result))

        async def finish(
            s: _ServerSession,
            counter: int,
            ctx: CallContext,
            later: Callable[[], Awaitable[Any]],
        ) -> SealedReply | Deferred:
            try:
                result = await _logged_as(ctx, later())
            except Exception as exc:
                return seal(s, counter, failed(exc))
            return answered(s, counter, ctx, result)

        async def on_sealed(req: SealedRequest, ctx: CallContext) -> SealedReply | Deferred:
            now = time.time()
            s = self._session(req.ticket, now)
            counter = req.counter
            if not 0 < counter < 1 << 88:
                raise ServiceError(400, "malformed sealed request")
            try:
                plain = s.aead.decrypt(_nonce(0, counter), req.box, req_aad)
            except InvalidTag:
                raise ServiceError(400, "the sealed request does not open") from None
            (sent,) = _TS.unpack_from(plain)
            if not abs(now - sent) <= MAX_SKEW:
                raise ServiceError(400, "stale sealed request")
            if not s.fresh(counter):
                raise ServiceError(400, "replayed sealed request")
            # One frame for the hot path: open, run with the request id bound, seal.
            bound = None
            try:
                request = request_dec.decode(memoryview(plain)[8:])
                # An envelope's request id travels sealed inside it, not as a bus header.
                ctx.request_id = getattr(request, "request_id", "") or ctx.request_id
                if ctx.request_id:
                    bound = bind_contextvars(request_id=ctx.request_id)
                result = await handler(request, ctx)
            except Exception as exc:
                if bound is not None:
                    reset_contextvars(**bound)
                return seal(s, counter, failed(exc))
            if bound is not None:
                reset_contextvars(**bound)
            return answered(s, counter, ctx, result)

        return on_sealed


async def _logged_as(ctx: CallContext, work: Awaitable[T]) -> T:
    """Await `work` with the request id bound for its log lines."""
    if not ctx.request_id:
        return await work
    bound = bind_contextvars(request_id=ctx.request_id)
    try:
        return await work
    finally:
        reset_contextvars(**bound)


async def serve_api(
    bus: Bus,
    key: ServiceKey,
    cluster: str,
    api: Subject,
    handler: ApiHandler,
    *,
    concurrency: int,
) -> SessionServer:
    """Serve a service's API sealed end to end: the handshake subject (`<api>.session`) and
    the API subject, which takes only sealed envelopes. The same for every service."""
    sessions = SessionServer(key, cluster)
    subject = api.on(cluster)
    await bus.serve(
        subject + ".session",
        sessions.handshake,
        SessionHello,
        queue=api.queue,
        concurrency=concurrency,
    )
    await bus.serve(
        subject,
        sessions.serve(handler),
        SealedRequest,
        queue=api.queue,
        concurrency=concurrency,
        batched=True,
    )
    return sessions
