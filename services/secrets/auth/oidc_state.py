"""The state of an OIDC browser login, carried by the browser rather than kept by Trellis.

`oidc/auth_url` is unauthenticated, so it must not write per call (a flood would grow storage).
The state (role, redirect URI, nonce, PKCE verifier, expiry) is sealed with AES-256-GCM under a
key kept in the mount's barrier storage and becomes the `state` parameter itself; whichever
replica receives the callback opens it. Sealed, not merely signed: the PKCE verifier must stay
secret from the browser. A state serves one callback, whatever its outcome: the callback
records the state's id until the state expires, so only callbacks with a genuine state write.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import secrets
import time
from typing import TYPE_CHECKING

import msgspec
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from shared.storage import CasConflict

if TYPE_CHECKING:
    from services.secrets.core.barrier import BarrierView

STATE_SECONDS = 600
KEY = "oidc_state_key"
USED_PREFIX = "oidc_state/"
SWEEP_SECONDS = 60.0
_AAD = b"trellis oidc state v1"
_NONCE_BYTES = 12
# Far above any real state (a few hundred characters): longer input is refused unread.
_MAX_CHARS = 4096


class OidcState(msgspec.Struct, kw_only=True):
    id: str
    role: str
    redirect_uri: str
    nonce: str
    code_verifier: str
    client_nonce: str = ""
    expires_at: float


class _Used(msgspec.Struct, kw_only=True):
    expires_at: float


def new_state(role: str, redirect_uri: str, client_nonce: str) -> OidcState:
    return OidcState(
        id=secrets.token_hex(16),
        role=role,
        redirect_uri=redirect_uri,
        nonce=secrets.token_hex(20),
        code_verifier=secrets.token_urlsafe(48),
        client_nonce=client_nonce,
        expires_at=time.time() + STATE_SECONDS,
    )


class OidcStates:
    """Seals and opens the states of one mount, and remembers which ones were used."""

    def __init__(self, storage: BarrierView) -> None:
        self.storage = storage
        self._aead: AESGCM | None = None
        self._last_sweep = 0.0

    async def _cipher(self) -> AESGCM:
        """The mount's state key: created by the first auth_url ever, then read once per
        replica (two replicas creating it at once agree on the first one stored)."""
        while self._aead is None:
            raw = await self.storage.get(KEY)
            if raw is None:
                fresh = AESGCM.generate_key(bit_length=256)
                with contextlib.suppress(CasConflict):
                    await self.storage.create(KEY, fresh)
                    raw = fresh
            if raw is not None:
                self._aead = AESGCM(raw)
        return self._aead

    async def seal(self, state: OidcState) -> str:
        nonce = os.urandom(_NONCE_BYTES)
        box = (await self._cipher()).encrypt(nonce, msgspec.msgpack.encode(state), _AAD)
        return base64.urlsafe_b64encode(nonce + box).rstrip(b"=").decode()

    async def open(self, value: str) -> OidcState | None:
        """The state `value` carries; None if it is not one of ours, was altered, has expired
        or has served its login already."""
        if not value or len(value) > _MAX_CHARS:
            return None
        try:
            raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
            plain = (await self._cipher()).decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], _AAD)
            state = msgspec.msgpack.decode(plain, type=OidcState)
        except (binascii.Error, ValueError, InvalidTag, msgspec.DecodeError):
            return None
        if state.expires_at < time.time() or await self.storage.get(USED_PREFIX + state.id):
            return None
        return state

    async def use(self, state: OidcState) -> bool:
        """Record that a callback took `state`; False if another callback took it first."""
        await self._sweep()
        try:
            await self.storage.create(
                USED_PREFIX + state.id, msgspec.json.encode(_Used(expires_at=state.expires_at))
            )
        except CasConflict:
            return False
        return True

    async def _sweep(self) -> None:
        """Forget used states once they have expired anyway, now and then."""
        now = time.time()
        if now - self._last_sweep < SWEEP_SECONDS:
            return
        self._last_sweep = now
        for sid in await self.storage.list(USED_PREFIX):
            got = await self.storage.get_obj_entry(USED_PREFIX + sid, _Used)
            if got is not None and got[0].expires_at < now:
                try:
                    await self.storage.delete(USED_PREFIX + sid, got[1])
                except CasConflict:
                    continue
