"""The transit backend: one mount's keys, a per-replica cache of them, and the crypto workers.

Keys are cached in each replica. Every change (create, rotate, config, trim, delete, restore)
is a compare-and-set on the stored key, then an invalidation broadcast that drops the entry on
the other replicas; a cached entry also expires after MAX_AGE seconds, so a lost broadcast
costs at most that much staleness.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Callable
from typing import Any

import msgspec
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from services.crypto.client import crypto_call
from services.secrets.engines.transit import (
    paths_crypt,
    paths_keys,
    paths_misc,
    paths_sign,
)
from services.secrets.engines.transit.fastfields import plain_fields
from services.secrets.engines.transit.policy import (
    Policy,
    TransitError,
    add_version,
    blank_version,
    new_version_material,
    rotation_due,
    set_private,
)
from services.secrets.errors import SecretsError, bad_request
from services.secrets.framework.backend import Backend, Routed
from services.secrets.framework.path import Op, Path
from services.secrets.framework.request import Request, Response
from shared.errors import ServiceError
from shared.storage import CasConflict

MAX_AGE = 5.0
CALL_TIMEOUT = 30.0
SLOW_CALL_TIMEOUT = 120.0  # RSA-4096 generation
_json = msgspec.json.Encoder()
_BACKENDS: weakref.WeakSet[TransitBackend] = weakref.WeakSet()


def invalidated(core: Any, what: str) -> None:
    """An invalidation from another replica: `transit:<mount uuid>:<key name>`."""
    _, _, rest = what.partition(":")
    uuid, _, name = rest.partition(":")
    for b in list(_BACKENDS):
        if b.core is core and b.mount is not None and b.mount.uuid == uuid:
            b.forget(name)


class TransitBackend(Backend):
    type_name = "transit"
    help_text = (
        "The transit engine is encryption as a service: it keeps named keys and encrypts, "
        "decrypts, signs, verifies and HMACs data sent to it, without storing that data."
    )

    def build_paths(self) -> list[Path]:
        self.keys: dict[str, tuple[Policy, float]] = {}
        self._fetching: dict[str, asyncio.Future[Policy | None]] = {}
        # cache-config's size (0: no limit), read once per replica as Vault reads it at start.
        self.cache_size: int | None = None
        # Bumped on every invalidation: a read that began before one must not refill the cache.
        self.epoch = 0
        _BACKENDS.add(self)
        # The hot paths first: the router tries templates in order.
        return [
            *paths_crypt.paths(self),
            *paths_sign.paths(self),
            *paths_misc.paths(self),
            *paths_keys.paths(self),
        ]

    def decode(self, routed: Routed, data: dict[str, Any]) -> tuple[Any, list[str]]:
        path = routed.path
        if not path.arbitrary_input:
            fields = plain_fields(path.fields, data, routed.captures)
            if fields is not None:
                return fields, []
        return super().decode(routed, data)

    async def call(self, routed: Routed, op: Op, req: Request, fields: Any) -> Response:
        # Backend.call's refusals, plus the key's own, in one frame per request.
        spec = self.operation(routed, op)
        try:
            return await spec.handler(req, fields)
        except SecretsError:
            raise
        except TransitError as exc:
            raise bad_request(str(exc)) from None
        except msgspec.ValidationError as exc:
            raise bad_request(str(exc)) from None

    # ---- storage and cache ------------------------------------------------------------------
    def cached(self, name: str) -> Policy | None:
        """The cached key when `load` would answer it at once (fresh, no rotation due)."""
        hit = self.keys.get(name)
        if hit is None or time.monotonic() - hit[1] >= MAX_AGE:
            return None
        p = hit[0]
        return None if p.auto_rotate_period > 0 else p

    async def load(self, name: str) -> Policy | None:
        hit = self.keys.get(name)
        if hit is not None and time.monotonic() - hit[1] < MAX_AGE:
            p: Policy | None = hit[0]
        else:
            # The requests that miss together share one storage read and decode.
            fetch = self._fetching.get(name)
            if fetch is None:
                fetch = self._fetching[name] = asyncio.ensure_future(self._fetch(name))
                fetch.add_done_callback(lambda f: self._dropped(name, f))
            p = await asyncio.shield(fetch)
            if p is None:
                return None
        if p.auto_rotate_period > 0 and rotation_due(p, time.time()):
            p = await self.rotate(name, only_if_due=True) or p
        return p

    async def _fetch(self, name: str) -> Policy | None:
        now, epoch = time.monotonic(), self.epoch
        got = await self.storage.get_entry(f"policy/{name}")
        if got is None:
            if epoch == self.epoch:
                self.keys.pop(name, None)
            return None
        p = msgspec.json.decode(got[0], type=Policy)
        if epoch == self.epoch:
            await self._remember(name, p, now)
        return p

    def _dropped(self, name: str, fetch: asyncio.Future[Policy | None]) -> None:
        if self._fetching.get(name) is fetch:
            del self._fetching[name]
        if not fetch.cancelled():
            fetch.exception()  # its waiters got it; never "exception was never retrieved"

    async def _remember(self, name: str, p: Policy, now: float) -> None:
        if self.cache_size is None:
            cfg = await self.storage.get_obj(paths_misc.CACHE_CONFIG, paths_misc.CacheConfig)
            self.cache_size = cfg.size if cfg else 0
        self.keys.pop(name, None)
        self.keys[name] = (p, now)
        while self.cache_size and len(self.keys) > self.cache_size:
            del self.keys[next(iter(self.keys))]  # the least recently loaded

    async def require(self, name: str, missing: str) -> Policy:
        p = await self.load(name)
        if p is None:
            raise bad_request(missing)
        return p

    def forget(self, name: str) -> None:
        self.keys.pop(name, None)
        # Requests from now on read the changed key, not a read begun before the change.
        self._fetching.pop(name, None)
        self.epoch += 1

    async def fresh(self, name: str) -> Policy | None:
        """Drop the cached copy and read the stored one (after a version-too-new surprise)."""
        self.forget(name)
        return await self.load(name)

    async def create(self, p: Policy) -> bool:
        """Store a new key; False when one of that name appeared meanwhile."""
        try:
            await self.storage.create(f"policy/{p.name}", _json.encode(p))
        except CasConflict:
            return False
        await self._changed(p.name)
        return True

    async def put(self, p: Policy) -> None:
        await self.storage.put(f"policy/{p.name}", _json.encode(p))
        await self._changed(p.name)

    async def mutate(self, name: str, change: Callable[[Policy], Any]) -> tuple[Policy, Any] | None:
        """Apply `change` to the stored key with compare-and-set; None when there is no key."""
        for _ in range(20):
            got = await self.storage.get_entry(f"policy/{name}")
            if got is None:
                return None
            p = msgspec.json.decode(got[0], type=Policy)
            result = change(p)
            try:
                await self.storage.update(f"policy/{name}", _json.encode(p), got[1])
            except CasConflict:
                continue
            await self._changed(name)
            self.keys[name] = (p, time.monotonic())
            return p, result
        raise SecretsError(409, f"key {name} is changing too fast to update; retry")

    async def delete(self, name: str) -> None:
        await self.storage.delete(f"policy/{name}")
        await self._changed(name)

    async def _changed(self, name: str) -> None:
        self.forget(name)
        if self.mount is not None:
            await self.core.broadcast_invalidate(f"transit:{self.mount.uuid}:{name}")

    # ---- key material -----------------------------------------------------------------------
    async def new_material(self, p: Policy) -> Any:
        kt = p.kt
        if not kt.is_rsa:
            return new_version_material(kt, p.key_size)
        # RSA generation takes tens to hundreds of milliseconds: a crypto worker's job.
        result = await self.crypto(
            "generate_key", {"key_type": "rsa", "key_bits": kt.rsa_bits}, slow=True
        )
        entry = blank_version()
        set_private(entry, load_pem_private_key(result["private_key_pkcs8"].encode(), None))
        return entry

    async def rotate(self, name: str, *, only_if_due: bool = False) -> Policy | None:
        """Add a version; `only_if_due` (auto-rotation) re-checks under compare-and-set, so
        replicas and requests that all found the key due rotate it once."""
        current = await self.storage.get(f"policy/{name}")
        if current is None:
            return None
        material = await self.new_material(msgspec.json.decode(current, type=Policy))

        def change(p: Policy) -> None:
            if not only_if_due or rotation_due(p, time.time()):
                add_version(p, material)

        done = await self.mutate(name, change)
        return None if done is None else done[0]

    async def crypto(self, op: str, args: dict[str, Any], *, slow: bool = False) -> Any:
        """Run one op on a crypto worker; its refusals become 400s naming the problem."""
        try:
            return await crypto_call(
                self.core.bus,
                self.core.settings.cluster_name,
                op,
                args,
                timeout=SLOW_CALL_TIMEOUT if slow else CALL_TIMEOUT,
            )
        except ServiceError as exc:
            if exc.code == 400:
                raise bad_request(exc.message) from None
            raise SecretsError(exc.code, exc.message) from None
