"""The token store: service tokens with TTLs, use counts, parents and accessors.

Token ids never appear in storage keys: entries live at `sys/token/id/<hmac(id)>`, accessors at
`sys/token/accessor/<hmac(accessor)>`, children at `sys/token/parent/<hmac(parent)>/<hmac>`.
Comparisons are by HMAC over the token's exact bytes, so no token is compared byte by byte with
user input, and no suffix or encoding trick reaches another token's key.

Every token gets a lease at `<path>/h<hmac>` (services/secrets/core/expiration.py): revoking that
lease, a prefix above it, or the mount it came from revokes the token and its children.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import string
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import msgspec

from services.secrets.auth.exact import secret_bytes
from services.secrets.core.mounts import DEFAULT_LEASE_TTL, MAX_LEASE_TTL
from services.secrets.keyring import UnknownTerm

if TYPE_CHECKING:
    from services.secrets.core.core import Core
    from services.secrets.core.namespaces import Namespace

_B62 = string.ascii_letters + string.digits


def random_b62(n: int = 24) -> str:
    # One draw below 62**n, written in base 62: uniform like n separate choices, at a
    # fraction of their cost (this runs twice per token created).
    value = secrets.randbelow(62**n)
    out = []
    for _ in range(n):
        value, digit = divmod(value, 62)
        out.append(_B62[digit])
    return "".join(out)


class TokenEntry(msgspec.Struct, kw_only=True):
    id: str
    accessor: str
    policies: list[str] = []
    meta: dict[str, str] | None = None
    display_name: str = "token"
    path: str = "auth/token/create"
    parent: str = ""  # hmac of the parent's id
    creation_time: float = 0.0
    ttl: int = 0  # creation TTL in seconds (0: never expires)
    explicit_max_ttl: int = 0
    period: int = 0
    num_uses: int = 0
    renewable: bool = True
    orphan: bool = False
    namespace_id: str = "root"
    type: str = "service"
    entity_id: str = ""
    expire_time: float = 0.0  # 0: never
    role: str = ""
    # Data an auth method keeps with its logins (for renewal checks).
    internal: dict[str, str] = {}
    # "wrapping" tokens carry a wrapped response in their own storage.
    purpose: str = ""
    # CIDRs the token may be used from (its login's token_bound_cidrs); empty: anywhere.
    bound_cidrs: list[str] = []

    def is_root(self) -> bool:
        return "root" in self.policies

    def expired(self, now: float | None = None) -> bool:
        return bool(self.expire_time) and (now or time.time()) >= self.expire_time

    def remaining(self, now: float | None = None) -> int:
        if not self.expire_time:
            return 0
        return max(0, int(self.expire_time - (now or time.time())))


# How long a replica trusts a cached token without reading storage. Revocations reach every
# replica at once by broadcast; this bounds the damage of a missed broadcast.
CACHE_SECONDS = 5.0
CACHE_MAX = 100_000
HASHED_MAX = 16_384  # token ids and accessors whose salted hash is remembered


class TokenStore:
    """Tokens in storage, with a small per-replica cache of unlimited-use tokens so that the
    hot path (every request) costs no storage round trip."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.salt = b""
        self._mac = hmac.new(b"", digestmod=hashlib.sha256)
        self._hashed: dict[str, str] = {}
        self._cache: dict[str, tuple[TokenEntry, float]] = {}
        self._invalidated: dict[str, float] = {}

    def invalidate_local(self, key: str | None = None) -> None:
        now = time.monotonic()
        if key is None:
            self._cache.clear()
            self._invalidated.clear()
            return
        self._cache.pop(key, None)
        self._invalidated[key] = now
        if len(self._invalidated) > 10_000:
            cutoff = now - 60
            self._invalidated = {k: t for k, t in self._invalidated.items() if t > cutoff}

    async def invalidate(self, key: str) -> None:
        self.invalidate_local(key)
        await self.core.broadcast_invalidate(f"token:{key}")

    async def load_salt(self) -> None:
        view = self.core.barrier.view("")
        got = await view.get("core/salt")
        if got is None:
            got = secrets.token_bytes(32)
            try:
                await view.create("core/salt", got)
            except Exception:
                got = await view.get("core/salt") or got
        self.salt = got
        self._mac = hmac.new(got, digestmod=hashlib.sha256)
        self._hashed = {}

    def hash(self, value: str) -> str:
        # Remembered in memory (bounded, dropped with the salt): the same tokens come back
        # request after request. A copy of the keyed state skips the key schedule.
        got = self._hashed.get(value)
        if got is None:
            mac = self._mac.copy()
            mac.update(secret_bytes(value))
            got = mac.hexdigest()
            if len(self._hashed) >= HASHED_MAX:
                self._hashed.pop(next(iter(self._hashed)))
            self._hashed[value] = got
        return got

    def _view(self, namespace_id: str):  # type: ignore[no-untyped-def]
        ns = self.core.namespaces.by_id.get(namespace_id)
        return None if ns is None else self.core.namespaces.view(ns).sub("sys/token/")

    @staticmethod
    def namespace_of(token_id: str) -> str:
        # hvs.<24 chars> in the root namespace, hvs.<24>.<nsid> elsewhere.
        parts = token_id.split(".")
        return parts[2] if len(parts) == 3 else "root"

    def new_id(self, ns: Namespace) -> str:
        base = "hvs." + random_b62()
        return base if ns.is_root else f"{base}.{ns.id}"

    # ---- write ----------------------------------------------------------------------
    async def create(self, entry: TokenEntry, *, custom_id: bool = False) -> TokenEntry:
        view = self._view(entry.namespace_id)
        assert view is not None
        entry.creation_time = entry.creation_time or time.time()
        if entry.ttl and not entry.expire_time:
            entry.expire_time = entry.creation_time + entry.ttl
        key = self.hash(entry.id)
        record = view.create(f"id/{key}", msgspec.json.encode(entry))
        if custom_id:
            # First, alone: a custom id that exists already stops the creation here, before
            # its indexes could point at the other token.
            await record
        # The rest are independent (a generated id never collides): in flight together, so
        # one socket write carries them all and the reply waits for one round of
        # acknowledgements. The token's lease also drives its expiry (the expiry leader
        # derives the schedule from it), so no schedule entry is written.
        writes = [
            view.put_obj(f"accessor/{self.hash(entry.accessor)}", {"token": key}),
            self.core.expiration.register_auth(entry, self.mount_of(entry)),
        ]
        if not custom_id:
            writes.append(record)
        if entry.parent:
            writes.append(view.put(f"parent/{entry.parent}/{key}", b""))
        # Every write settles before the answer, even when one fails.
        results = await asyncio.gather(*writes, return_exceptions=True)
        failed = next((r for r in results if isinstance(r, BaseException)), None)
        if failed is not None:
            await self._undo_create(entry, key)
            raise failed
        return entry

    async def _undo_create(self, entry: TokenEntry, key: str) -> None:
        """Take back what a failed create wrote: the caller never learns the token, so its
        record, indexes and lease must not outlive the error. The record is ours to delete: a
        generated id never collides and a custom one was created alone first. Best effort:
        what a storage outage leaves behind, readers skip (an index or lease whose record is
        missing counts as gone)."""
        view = self._view(entry.namespace_id)
        assert view is not None
        undo = [
            view.delete(f"accessor/{self.hash(entry.accessor)}"),
            self.core.expiration.forget_auth(entry),
            view.delete(f"id/{key}"),
        ]
        if entry.parent:
            undo.append(view.delete(f"parent/{entry.parent}/{key}"))
        await asyncio.gather(*undo, return_exceptions=True)

    def mount_of(self, entry: TokenEntry) -> str:
        """The path of the mount a token came from ("" when it is gone)."""
        ns = self.core.namespaces.by_id.get(entry.namespace_id)
        mount = None if ns is None else self.core.table(ns).match(entry.path)
        return mount.path if mount is not None else ""

    async def create_root(self, token_id: str = "") -> str:
        from services.secrets.core.namespaces import ROOT

        entry = TokenEntry(
            id=token_id or self.new_id(ROOT),
            accessor=random_b62(),
            policies=["root"],
            display_name="root",
            path="auth/token/root",
            orphan=True,
        )
        await self.create(entry, custom_id=bool(token_id))
        return entry.id

    async def save(self, entry: TokenEntry) -> None:
        view = self._view(entry.namespace_id)
        assert view is not None
        key = self.hash(entry.id)
        await view.put_obj(f"id/{key}", entry)
        await self.invalidate(key)

    async def create_batch(self, entry: TokenEntry) -> TokenEntry:
        """A batch token: the entry sealed into the token itself, nothing stored."""
        from services.secrets.core import batch_tokens

        keyring = self.core.barrier.keyring
        if keyring is None:
            raise RuntimeError("sealed")
        entry.type = "batch"
        entry.accessor = ""
        entry.renewable = False
        entry.creation_time = entry.creation_time or time.time()
        if entry.ttl and not entry.expire_time:
            entry.expire_time = entry.creation_time + entry.ttl
        batch_tokens.seal(keyring, entry)
        return entry

    async def _lookup_batch(self, token_id: str) -> TokenEntry | None:
        from services.secrets.core import batch_tokens

        barrier = self.core.barrier
        try:
            entry = (
                None
                if barrier.keyring is None
                else batch_tokens.open_token(barrier.keyring, token_id)
            )
        except UnknownTerm:
            # Minted just after a rotation whose invalidation has not reached us yet.
            if barrier.on_unknown_term is None:
                return None
            await barrier.on_unknown_term()
            if barrier.keyring is None:
                return None
            try:
                entry = batch_tokens.open_token(barrier.keyring, token_id)
            except UnknownTerm:
                return None
        if entry is None or entry.expired():
            return None
        if entry.parent:
            # It dies with its parent: the parent's entry must still exist.
            view = self._view(entry.namespace_id)
            if view is None or await view.get(f"id/{entry.parent}") is None:
                return None
        return entry

    # ---- read -----------------------------------------------------------------------
    def cached(self, token_id: str) -> TokenEntry | None:
        """The entry `lookup` would answer from the cache, without a coroutine; None when it
        would read storage (then call `lookup`)."""
        if not token_id or len(token_id) > 256 or token_id.startswith("hvb."):
            return None
        hit = self._cache.get(self.hash(token_id))
        if hit is not None and time.monotonic() - hit[1] < CACHE_SECONDS and not hit[0].expired():
            return hit[0]
        return None

    async def lookup(self, token_id: str) -> TokenEntry | None:
        if token_id.startswith("hvb."):
            return await self._lookup_batch(token_id)
        hit = self.cached(token_id)
        if hit is not None:
            return hit
        if not token_id or len(token_id) > 256:
            return None
        key = self.hash(token_id)
        started = time.monotonic()
        view = self._view(self.namespace_of(token_id))
        if view is None:
            return None
        entry = await view.get_obj(f"id/{key}", TokenEntry)
        if entry is None:
            self._cache.pop(key, None)
            return None
        if entry.expired():
            await self.revoke_tree(entry)
            return None
        # Limited-use tokens change on every use: always read them from storage. An entry
        # invalidated while we were reading it is not cached either.
        if entry.num_uses == 0 and self._invalidated.get(key, 0.0) < started:
            if len(self._cache) >= CACHE_MAX:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = (entry, started)
        return entry

    async def lookup_accessor(self, accessor: str, namespace_id: str) -> TokenEntry | None:
        view = self._view(namespace_id)
        if view is None or not accessor:
            return None
        ref = await view.get_obj(f"accessor/{self.hash(accessor)}", dict)
        if not ref:
            return None
        entry = await view.get_obj(f"id/{ref['token']}", TokenEntry)
        if entry is None or entry.expired():
            return None
        return entry

    async def accessors(self, namespace_id: str) -> list[str]:
        view = self._view(namespace_id)
        if view is None:
            return []
        out = []
        for key in await view.list("id/"):
            entry = await view.get_obj(f"id/{key}", TokenEntry)
            if entry is not None:
                out.append(entry.accessor)
        return sorted(out)

    async def use(self, entry: TokenEntry) -> TokenEntry | None:
        """Count one use of a limited-use token; revoke it on the last one. Returns None when
        the token has no uses left."""
        if entry.num_uses <= 0:
            return entry
        view = self._view(entry.namespace_id)
        assert view is not None
        key = f"id/{self.hash(entry.id)}"
        for _ in range(20):
            got = await view.get_obj_entry(key, TokenEntry)
            if got is None:
                return None
            current, rev = got
            if current.num_uses < 0:
                return None  # spent by a concurrent request that won the CAS
            if current.num_uses == 0:
                return current
            current.num_uses -= 1
            try:
                if current.num_uses == 0:
                    # The last use: the token is spent; revoke after this request.
                    current.num_uses = -1
                await view.update(key, msgspec.json.encode(current), rev)
                return current
            except Exception:
                continue
        return None

    # ---- revoke ---------------------------------------------------------------------
    async def revoke_tree(self, entry: TokenEntry) -> None:
        """Revoke a token, its leases, and (recursively) its children."""
        await self._revoke_with_children(entry, self.revoke_tree)

    async def revoke_orphan(self, entry: TokenEntry) -> None:
        """Revoke only this token; its children become orphans."""

        async def orphan(child: TokenEntry) -> None:
            child.parent = ""
            child.orphan = True
            await self.save(child)

        await self._revoke_with_children(entry, orphan)

    async def _revoke_with_children(
        self, entry: TokenEntry, on_child: Callable[[TokenEntry], Awaitable[None]]
    ) -> None:
        view = self._view(entry.namespace_id)
        if view is None:
            return
        key = self.hash(entry.id)
        for child_key in await view.list(f"parent/{key}/"):
            child = await view.get_obj(f"id/{child_key}", TokenEntry)
            if child is not None:
                await on_child(child)
            await view.delete(f"parent/{key}/{child_key}")
        await self.revoke_one(entry)

    async def revoke_one(self, entry: TokenEntry) -> None:
        view = self._view(entry.namespace_id)
        if view is None:
            return
        key = self.hash(entry.id)
        await self.core.expiration.revoke_by_token(key)
        await view.delete(f"id/{key}")
        await self.invalidate(key)
        await view.delete(f"accessor/{self.hash(entry.accessor)}")
        if entry.parent:
            await view.delete(f"parent/{entry.parent}/{key}")
        await self.core.expiration.forget_token(entry)
        await self.core.expiration.forget_auth(entry)
        await self.core.wrapping.forget(key)

    # ---- lifetimes --------------------------------------------------------------------
    def ttl_limits(self, mount_default: int, mount_max: int) -> tuple[int, int]:
        return mount_default or DEFAULT_LEASE_TTL, mount_max or MAX_LEASE_TTL

    async def renew(self, entry: TokenEntry, increment: int) -> TokenEntry:
        now = time.time()
        _, max_ttl = self.ttl_limits(0, 0)
        ttl = entry.period or increment or entry.ttl or DEFAULT_LEASE_TTL
        cap_at = entry.creation_time + (entry.explicit_max_ttl or max_ttl)
        if not entry.period or entry.explicit_max_ttl:
            ttl = int(min(ttl, max(0, cap_at - now)))
        # creation_ttl (entry.ttl) stays what it was at creation, as Vault reports it.
        entry.expire_time = now + ttl if ttl else entry.expire_time
        await self.save(entry)
        # The lease carries the new expiry to the expiry leader; a token without one (created
        # before tokens had leases) is scheduled on its own.
        if not await self.core.expiration.renewed_auth(entry):
            await self.core.expiration.register_token(entry)
        return entry
