"""Sealed control messages: AES-GCM under a key only genuine senders hold, with a timestamp and
a nonce, so the receiver (not only NATS permissions) decides who may command it.

A box is `version(1) | timestamp(8, big-endian float seconds) | nonce(12) | ciphertext`. The
associated data binds the purpose and the subject, so a box made for one subject cannot be
replayed on another. The receiver rejects boxes older or newer than `window` seconds, and boxes
whose nonce it has already opened inside that window (replays).
"""

from __future__ import annotations

import os
import struct
import time

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

VERSION = b"\x01"
_HEADER = struct.Struct(">d12s")

# Purposes: boxes made for one channel never open on another, even under the same key.
REPLICA = b"trellis replica control"
CRYPTO = b"trellis crypto command"
HEADER_BYTES = 1 + _HEADER.size


class Rejected(Exception):
    """A box that is forged, stale, replayed or malformed. The message never holds its content."""


class ControlBox:
    """Seal and open control messages under one symmetric key."""

    def __init__(self, key: bytes, purpose: bytes, *, window: float = 30.0) -> None:
        self._aead = AESGCM(key)
        self._purpose = purpose
        self.window = window
        self._seen: dict[bytes, float] = {}  # nonce -> when it may be forgotten
        self._next_prune = 0.0

    def seal(self, context: str | bytes, payload: bytes) -> bytes:
        nonce = os.urandom(12)
        header = VERSION + _HEADER.pack(time.time(), nonce)
        return header + self._aead.encrypt(nonce, payload, self._aad(context, header))

    def open(self, context: str | bytes, box: bytes) -> bytes:
        if len(box) < HEADER_BYTES + 16 or box[:1] != VERSION:
            raise Rejected("malformed control message")
        header = box[:HEADER_BYTES]
        sent, nonce = _HEADER.unpack(header[1:])
        now = time.time()
        if not abs(now - sent) <= self.window:  # also false for NaN
            raise Rejected("stale control message")
        if nonce in self._seen:
            raise Rejected("replayed control message")
        try:
            payload = self._aead.decrypt(nonce, box[HEADER_BYTES:], self._aad(context, header))
        except InvalidTag:
            raise Rejected("control message not sealed by a member of this cluster") from None
        # Only authentic boxes are remembered: forgeries cannot fill the cache.
        self._seen[nonce] = now + 2 * self.window
        if now >= self._next_prune:
            self._next_prune = now + self.window
            self._seen = {n: t for n, t in self._seen.items() if t > now}
        return payload

    @staticmethod
    def nonce_of(box: bytes) -> bytes:
        """The nonce of a box, to bind a reply to the request it answers."""
        return box[9:HEADER_BYTES]

    @staticmethod
    def reply_context(subject: str, request: bytes) -> str:
        """The context of the reply to `request`: a reply opens only for its own request."""
        return f"{subject}.reply.{request[9:HEADER_BYTES].hex()}"

    def _aad(self, context: str | bytes, header: bytes) -> bytes:
        ctx = context.encode() if isinstance(context, str) else context
        return self._purpose + b"\x00" + ctx + b"\x00" + header
