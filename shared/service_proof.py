"""A request signed by a certified service replica (shared/service_identity.py), for a receiver
that must know a genuine replica of one service asks, whatever NATS let through: e.g. a client
node obeying the scheduler's fs, log, restart and signal requests.

The proof is the service's name, key and certificate, a timestamp and a signature over the
purpose, cluster, service, timestamp and the request's bytes. The receiver checks the
certificate against the cluster public key for the service it expects, the signature, the
timestamp (±MAX_SKEW) and that it has not seen this signature before (a replay)."""

from __future__ import annotations

import struct
import time

import msgspec
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from shared.service_identity import ServiceKey, verify_service

MAX_SKEW = 30.0


class Proof(msgspec.Struct, kw_only=True):
    service: str
    service_public: bytes
    certificate: bytes
    sent: float
    signature: bytes


class NotProven(Exception):
    """Not signed now by a genuine replica of the expected service; the message says why."""


def _message(purpose: bytes, cluster: str, service: str, sent: float, body: bytes) -> bytes:
    head = b"\x00".join((b"trellis service proof v1", purpose, cluster.encode(), service.encode()))
    return head + b"\x00" + struct.pack(">d", sent) + body


def prove(key: ServiceKey, cluster: str, purpose: bytes, body: bytes) -> Proof:
    sent = time.time()
    signature = key.signing_key.sign(_message(purpose, cluster, key.service, sent, body))
    return Proof(
        service=key.service,
        service_public=key.public,
        certificate=key.certificate,
        sent=sent,
        signature=signature,
    )


class Verifier:
    """The receiver's side, for one expected service and purpose."""

    def __init__(
        self, cluster_public: Ed25519PublicKey, cluster: str, service: str, purpose: bytes
    ) -> None:
        self.cluster_public = cluster_public
        self.cluster = cluster
        self.service = service
        self.purpose = purpose
        self._seen: dict[bytes, float] = {}

    def check(self, proof: Proof | None, body: bytes, now: float | None = None) -> None:
        now = time.time() if now is None else now
        if proof is None:
            raise NotProven(f"the request carries no proof of a {self.service} replica")
        if proof.service != self.service:
            raise NotProven(f"the request is from {proof.service!r}, not {self.service!r}")
        try:
            key = verify_service(
                self.cluster_public, self.service, proof.service_public, proof.certificate
            )
            key.verify(
                proof.signature,
                _message(self.purpose, self.cluster, proof.service, proof.sent, body),
            )
        except InvalidSignature:
            raise NotProven(f"the request is not signed by a genuine {self.service}") from None
        if not abs(now - proof.sent) <= MAX_SKEW:  # also false for NaN
            raise NotProven("stale request")
        if proof.signature in self._seen:
            raise NotProven("replayed request")
        self._seen[proof.signature] = now + 2 * MAX_SKEW
        if len(self._seen) > 4096:
            self._seen = {s: t for s, t in self._seen.items() if t > now}
