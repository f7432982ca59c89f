"""End-to-end encryption of secrets API envelopes between the gateway and the secrets replicas.

Handshake (once per gateway session, on `{cluster}.api.secrets.session`): the gateway sends an
ephemeral X25519 public key and a nonce; a replica answers with its own ephemeral key, a ticket,
an expiry, and an Ed25519 signature over all of it by the secrets cluster key, which the gateway
pins by public key. Both derive the session key from the X25519 secret (HKDF). The ticket is
the session key sealed under a key every replica derives from the cluster key, so whichever
replica of the queue group receives a request can open it; an impostor subscriber cannot.

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

import msgspec
import structlog
from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from shared.bus import Bus, CallContext
from shared.cluster_identity import ClusterIdentity
from shared.errors import BusTimeout, NoResponders, ServiceError
from shared.messages import HttpRequest, HttpResponse

log = structlog.get_logger("api_session")

PROTOCOL = b"trellis api session v1"
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
    signature: bytes


class SealedRequest(msgspec.Struct, kw_only=True):
    ticket: bytes
    counter: int
    box: bytes


class SealedReply(msgspec.Struct, kw_only=True):
    box: bytes


class ApiReply(msgspec.Struct, kw_only=True):
    response: HttpResponse | None = None
    code: int = 0
    message: str = ""


_request_enc = msgspec.msgpack.Encoder()
_request_dec = msgspec.msgpack.Decoder(HttpRequest)
_reply_dec = msgspec.msgpack.Decoder(ApiReply)


def _nonce(direction: int, counter: int) -> bytes:
    return bytes([direction]) + counter.to_bytes(11, "big")


def _aad(cluster: str, direction: bytes) -> bytes:
    return PROTOCOL + b"\x00" + cluster.encode() + b"\x00" + direction


def _transcript(cluster: str, hello: SessionHello, accept: SessionAccept) -> bytes:
    return b"\x00".join(
        (
            PROTOCOL,
            cluster.encode(),
            hello.gateway_public,
            hello.nonce,
            accept.replica_public,
            accept.ticket,
            _TS.pack(accept.expires),
        )
    )


def _session_key(shared: bytes, cluster: str, hello: SessionHello, replica_public: bytes) -> bytes:
    info = PROTOCOL + cluster.encode() + hello.gateway_public + replica_public
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
    """The gateway's encrypted channel to the secrets cluster pinned by `public_key`."""

    def __init__(self, bus: Bus, cluster: str, subject: str, public_key: Ed25519PublicKey) -> None:
        self.bus = bus
        self.cluster = cluster
        self.subject = subject
        self.handshake_subject = subject + ".session"
        self.public_key = public_key
        self._session: _ClientSession | None = None
        self._lock = asyncio.Lock()
        self._req_aad = _aad(cluster, b"req")
        self._rep_aad = _aad(cluster, b"rep")

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
        """Try until a replica proves it holds the cluster key; impostors' answers are dropped
        (the queue group may hand the next try to a genuine replica)."""
        for _ in range(HANDSHAKE_TRIES):
            private = X25519PrivateKey.generate()
            hello = SessionHello(
                gateway_public=private.public_key().public_bytes_raw(), nonce=os.urandom(16)
            )
            try:
                accept = await self.bus.request(
                    self.handshake_subject, hello, SessionAccept, timeout=HANDSHAKE_TIMEOUT
                )
                self.public_key.verify(accept.signature, _transcript(self.cluster, hello, accept))
                shared = private.exchange(X25519PublicKey.from_public_bytes(accept.replica_public))
            except (NoResponders, BusTimeout):
                raise
            except (ServiceError, InvalidSignature, ValueError, msgspec.DecodeError) as exc:
                log.warning("session handshake refused", reason=type(exc).__name__)
                continue
            key = _session_key(shared, self.cluster, hello, accept.replica_public)
            return _ClientSession(AESGCM(key), accept.ticket, time.monotonic())
        raise ServiceError(502, "no genuine secrets replica answered the session handshake")

    async def call(
        self, env: HttpRequest, *, timeout: float, request_id: str = "", caller: str = ""
    ) -> HttpResponse:
        """Send one envelope sealed and open the reply. A reply that does not open came from
        no genuine replica (they seal every answer once they opened a request), so the
        request never reached the service: it is sent again, and a 502 after UNAUTHENTIC_TRIES."""
        plain = _TS.pack(time.time()) + _request_enc.encode(env)
        refused = False
        for _ in range(UNAUTHENTIC_TRIES):
            s = await self.session()
            s.counter += 1
            counter = s.counter
            req = SealedRequest(
                ticket=s.ticket,
                counter=counter,
                box=s.aead.encrypt(_nonce(0, counter), plain, self._req_aad),
            )
            try:
                sealed = await self.bus.request(
                    self.subject,
                    req,
                    SealedReply,
                    timeout=timeout,
                    request_id=request_id,
                    caller=caller,
                )
                reply = _reply_dec.decode(
                    s.aead.decrypt(_nonce(1, counter), sealed.box, self._rep_aad)
                )
            except (NoResponders, BusTimeout):
                raise
            except ServiceError as exc:
                # Unsealed, so unauthenticated: at most worth a new session, never believed.
                if exc.code == SESSION_REFUSED and not refused:
                    refused = True
                    self.forget(s)
                log.warning("unauthenticated reply on the secrets subject", request_id=request_id)
                continue
            except (InvalidTag, msgspec.DecodeError):
                log.warning("unauthenticated reply on the secrets subject", request_id=request_id)
                continue
            if reply.code:
                raise ServiceError(reply.code, reply.message)
            assert reply.response is not None
            return reply.response
        raise ServiceError(502, "the secrets service's reply could not be authenticated")


# ---- the secrets replicas' side ------------------------------------------------------------


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


ApiHandler = Callable[[HttpRequest, CallContext], Awaitable[HttpResponse]]


class SessionServer:
    """A secrets replica's side: answers handshakes, opens requests, seals replies."""

    MAX_SESSIONS = 4096

    def __init__(self, identity: ClusterIdentity, cluster: str) -> None:
        if identity.signing_key is None or identity.ticket_key is None:
            raise ValueError("the secrets side of API sessions needs the cluster key")
        self.identity = identity
        self.cluster = cluster
        self._tickets = AESGCM(identity.ticket_key)
        self._ticket_aad = _aad(cluster, b"ticket")
        self._req_aad = _aad(cluster, b"req")
        self._rep_aad = _aad(cluster, b"rep")
        self._sessions: dict[bytes, _ServerSession] = {}

    async def handshake(self, hello: SessionHello, _ctx: CallContext) -> SessionAccept:
        if len(hello.gateway_public) != 32 or len(hello.nonce) != 16:
            raise ServiceError(400, "malformed session handshake")
        private = X25519PrivateKey.generate()
        replica_public = private.public_key().public_bytes_raw()
        shared = private.exchange(X25519PublicKey.from_public_bytes(hello.gateway_public))
        key = _session_key(shared, self.cluster, hello, replica_public)
        expires = time.time() + TICKET_LIFETIME
        nonce = os.urandom(12)
        ticket = nonce + self._tickets.encrypt(nonce, key + _TS.pack(expires), self._ticket_aad)
        accept = SessionAccept(
            replica_public=replica_public, ticket=ticket, expires=expires, signature=b""
        )
        assert self.identity.signing_key is not None
        accept.signature = self.identity.signing_key.sign(_transcript(self.cluster, hello, accept))
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
        self, handler: ApiHandler
    ) -> Callable[[SealedRequest, CallContext], Awaitable[SealedReply]]:
        """Wrap an API handler: open the request, run it, seal whatever it answers."""

        async def on_sealed(req: SealedRequest, ctx: CallContext) -> SealedReply:
            now = time.time()
            s = self._session(req.ticket, now)
            counter = req.counter
            if not 0 < counter < 1 << 88:
                raise ServiceError(400, "malformed sealed request")
            try:
                plain = s.aead.decrypt(_nonce(0, counter), req.box, self._req_aad)
            except InvalidTag:
                raise ServiceError(400, "the sealed request does not open") from None
            (sent,) = _TS.unpack(plain[:8])
            if not abs(now - sent) <= MAX_SKEW:
                raise ServiceError(400, "stale sealed request")
            if not s.fresh(counter):
                raise ServiceError(400, "replayed sealed request")
            try:
                reply = ApiReply(response=await handler(_request_dec.decode(plain[8:]), ctx))
            except ServiceError as exc:
                reply = ApiReply(code=exc.code, message=exc.message)
            except msgspec.DecodeError:
                reply = ApiReply(code=400, message="malformed envelope")
            except Exception:
                log.exception("handler failed", subject=ctx.subject)
                reply = ApiReply(code=500, message="internal error")
            box = s.aead.encrypt(_nonce(1, counter), _request_enc.encode(reply), self._rep_aad)
            return SealedReply(box=box)

        return on_sealed
