"""Encryption at rest for what a log-based service (workspace, scheduler) keeps that holds
secrets: AES-256-GCM under data keys that live in the secrets barrier and reach the service
sealed to a one-time key (shared/datakeys.py), so every secret in the mesh sits under the one
keyring of the barrier. Each ciphertext is bound to what it belongs to (the AAD), so a sealed
value cannot be moved to another record. Keys are fetched on first use, so a service starts
while the secrets service is sealed."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from shared import subjects
from shared.bus import Bus
from shared.datakeys import DataKeyReply, new_request, open_reply
from shared.errors import ServiceError
from shared.service_identity import ServiceKey

VERSION = b"\x01"  # ciphertext format: version byte, 12-byte nonce, AES-GCM output

Fetch = Callable[[str], Awaitable[bytes]]


class KeyUnavailable(Exception):
    """The data key could not be had; `reason` says why (never key material)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def seal(key: bytes, plaintext: bytes, aad: str) -> bytes:
    nonce = os.urandom(12)
    return VERSION + nonce + AESGCM(key).encrypt(nonce, plaintext, aad.encode())


def unseal(key: bytes, blob: bytes, aad: str) -> bytes:
    if len(blob) < 29 or blob[:1] != VERSION:
        raise ValueError("not a sealed value")
    try:
        return AESGCM(key).decrypt(blob[1:13], blob[13:], aad.encode())
    except InvalidTag:
        raise ValueError("sealed value does not authenticate") from None


def bus_fetch(bus: Bus, cluster: str, key: ServiceKey, timeout: float = 10.0) -> Fetch:
    """Fetch a named data key from the secrets service over the bus, asking as `key`'s
    service (the secrets service checks that identity: shared/datakeys.py)."""

    async def fetch(name: str) -> bytes:
        private, req = new_request(name, key, cluster)
        reply = await bus.request(
            subjects.DATA_KEY.on(cluster), req, DataKeyReply, timeout=timeout, caller=key.service
        )
        return open_reply(private, req, reply)

    return fetch


class Keys:
    """The data keys this replica holds in memory. Each is fetched again after `ttl` seconds,
    so that sealing the secrets service stops reads and writes here within that time."""

    def __init__(self, fetch: Fetch, ttl: float = 60.0) -> None:
        self._fetch = fetch
        self._ttl = ttl
        self._keys: dict[str, tuple[bytes, float]] = {}
        self._lock = asyncio.Lock()

    def _cached(self, name: str) -> bytes | None:
        entry = self._keys.get(name)
        if entry is None or time.monotonic() >= entry[1]:
            return None
        return entry[0]

    async def get(self, name: str) -> bytes:
        """The key, or KeyUnavailable (the secrets service sealed, down, or lying)."""
        key = self._cached(name)
        if key is not None:
            return key
        async with self._lock:
            if self._cached(name) is None:
                self._keys.pop(name, None)
                try:
                    fresh = await self._fetch(name)
                    self._keys[name] = (fresh, time.monotonic() + self._ttl)
                except ServiceError as exc:
                    raise KeyUnavailable(exc.message) from None
                except (ValueError, InvalidTag):
                    raise KeyUnavailable("the secrets service sent an unusable data key") from None
            return self._keys[name][0]
