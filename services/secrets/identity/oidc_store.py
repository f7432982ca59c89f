"""The stored state of the identity token issuer: config, named keys and roles.

Records live in the identity mount's barrier view under `oidc_tokens/` (as OpenBao lays them
out). Keys change with compare-and-set, so replicas changing the same key at once agree on one
result. Keys due for rotation are rotated by the expiry leader's pass (oidc_rotation.py), never
by a request: the JWKS and discovery reads are unauthenticated and must not write.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec

from services.crypto.client import crypto_call
from services.secrets.errors import SecretsError, bad_request
from services.secrets.identity.oidc_keys import ALGORITHMS, KeyVersion, key_version
from shared.errors import ServiceError
from shared.storage import CasConflict

if TYPE_CHECKING:
    from services.secrets.core.barrier import BarrierView

PREFIX = "oidc_tokens/"
CONFIG = PREFIX + "config"
KEYS = PREFIX + "named_keys/"
ROLES = PREFIX + "roles/"
DEFAULT_KEY = "default"
KEYGEN_TIMEOUT = 30.0
CAS_ATTEMPTS = 20


class OidcConfig(msgspec.Struct, kw_only=True):
    issuer: str = ""


class NamedKey(msgspec.Struct, kw_only=True):
    algorithm: str = "RS256"
    rotation_period: int = 86400
    verification_ttl: int = 86400
    allowed_client_ids: list[str] = []
    next_rotation: float = 0.0
    signing: KeyVersion | None = None
    upcoming: KeyVersion | None = None
    # Public halves of rotated-out keys, kept in the JWKS until their expire_at.
    retired: list[KeyVersion] = []

    def public_keys(self, now: float) -> list[KeyVersion]:
        live = [k for k in self.retired if k.expire_at > now]
        return [k for k in (self.signing, self.upcoming) if k is not None] + live

    def allows(self, client_id: str) -> bool:
        return "*" in self.allowed_client_ids or client_id in self.allowed_client_ids


class Role(msgspec.Struct, kw_only=True):
    key: str
    template: str = ""
    ttl: int = 86400
    client_id: str = ""


class OidcStore:
    def __init__(self, storage: BarrierView, core: object) -> None:
        self.storage = storage
        self.core = core

    # ---- config and roles -----------------------------------------------------------------
    async def config(self) -> OidcConfig:
        return await self.storage.get_obj(CONFIG, OidcConfig) or OidcConfig()

    async def role(self, name: str) -> Role | None:
        return await self.storage.get_obj(ROLES + name, Role)

    async def roles(self) -> dict[str, Role]:
        out: dict[str, Role] = {}
        for name in await self.storage.list(ROLES):
            role = await self.role(name)
            if role is not None:
                out[name] = role
        return out

    # ---- keys -----------------------------------------------------------------------------
    async def new_version(self, algorithm: str) -> KeyVersion:
        kind, bits = ALGORITHMS[algorithm]
        core = self.core
        try:
            result = await crypto_call(
                core.bus,  # type: ignore[attr-defined]
                core.settings.cluster_name,  # type: ignore[attr-defined]
                "generate_key",
                {"key_type": kind, "key_bits": bits},
                timeout=KEYGEN_TIMEOUT,
            )
        except ServiceError as exc:
            raise SecretsError(exc.code, exc.message) from None
        return key_version(result["private_key_pkcs8"], algorithm)

    async def key_entry(self, name: str) -> tuple[NamedKey, int] | None:
        return await self.storage.get_obj_entry(KEYS + name, NamedKey)

    async def change_key(
        self, name: str, change: Callable[[NamedKey | None], NamedKey | None]
    ) -> NamedKey | None:
        """Read-modify-write of one key with CAS; `change` returns None to write nothing."""
        for _ in range(CAS_ATTEMPTS):
            got = await self.key_entry(name)
            new = change(got[0] if got else None)
            if new is None:
                return got[0] if got else None
            raw = msgspec.json.encode(new)
            try:
                if got is None:
                    await self.storage.create(KEYS + name, raw)
                else:
                    await self.storage.update(KEYS + name, raw, got[1])
                return new
            except CasConflict:
                await asyncio.sleep(0.005)
        raise bad_request(f"key {name!r} is being changed concurrently; try again")

    async def rotate(self, name: str, verification_ttl: int | None = None) -> NamedKey | None:
        """Retire the signing key, promote the upcoming one, generate a new upcoming one."""
        got = await self.key_entry(name)
        if got is None:
            return None
        fresh = await self.new_version(got[0].algorithm)

        def change(key: NamedKey | None) -> NamedKey | None:
            return None if key is None else rotated(key, fresh, verification_ttl)

        return await self.change_key(name, change)

    async def key(self, name: str) -> NamedKey | None:
        got = await self.key_entry(name)
        return got[0] if got else None

    async def rotate_due(self) -> list[str]:
        """Rotate every key whose rotation time has come; the names of those rotated."""
        return [name for name in await self.storage.list(KEYS) if await self._rotate_if_due(name)]

    async def _rotate_if_due(self, name: str) -> bool:
        key = await self.key(name)
        if key is None or not _due(key, time.time()):
            return False
        fresh = await self.new_version(key.algorithm)
        done = False

        def change(k: NamedKey | None) -> NamedKey | None:
            nonlocal done
            # Rotated meanwhile (by a manual rotate or an earlier leader): leave it.
            done = k is not None and _due(k, time.time())
            return rotated(k, fresh, None) if done and k is not None else None

        await self.change_key(name, change)
        return done


def _due(key: NamedKey, now: float) -> bool:
    return bool(key.next_rotation) and key.next_rotation <= now


def rotated(key: NamedKey, fresh: KeyVersion, verification_ttl: int | None) -> NamedKey:
    now = time.time()
    ttl = key.verification_ttl if verification_ttl is None else verification_ttl
    retired = [k for k in key.retired if k.expire_at > now]
    if key.signing is not None:
        retired.append(msgspec.structs.replace(key.signing, private_pem="", expire_at=now + ttl))
    return msgspec.structs.replace(
        key,
        signing=key.upcoming or fresh,
        upcoming=fresh if key.upcoming is not None else None,
        retired=retired,
        next_rotation=now + key.rotation_period,
    )
