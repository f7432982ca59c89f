"""Leases and their expiry. Every lease and every expiring token has a schedule entry keyed by the
second it falls due; the leader (one replica, by a lease in KV) keeps the schedule's names in
memory, loaded from storage when it takes over and kept current by the KV stream (which carries
every replica's writes), so a pass touches only the due entries and expiry does not depend on
the replica that issued the lease.

Keys (root barrier): `sys/expire/id/<lease_id>` a lease of the root namespace,
`sys/expire/ns/<nsid>/id/<lease_id>` one of a child namespace (its id ends in `.<nsid>`, as
Vault's), `sys/expire/token/<token>/<h>` the leases of a token, `sys/expire/at/<minute>/<unix>-<h>`
the schedule.

Every token also has a lease, as in Vault: `<token path>/h<hmac(token)>` (a login's is under
`auth/<mount>/login/...`), so that revoking a lease prefix, or disabling the mount a token came
from, revokes the token and its children. The lease mirrors the token's times, and the leader
derives the token's place in the schedule from it (following the leases in the stream as it
follows the schedule), so creating a token writes no schedule entry. Tokens scheduled by entries
of their own (those from before, or without a lease) keep them until they fall due.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec
import structlog

from services.secrets.core import rotation
from services.secrets.core.expiry_index import ExpiryIndex
from services.secrets.core.tokens import TokenEntry, random_b62
from services.secrets.identity import oidc_rotation

if TYPE_CHECKING:
    from services.secrets.core.core import Core

log = structlog.get_logger("expiration")

MAX_REVOKE_ATTEMPTS = 6
PASS_SECONDS = 0.5  # the leader's expiry pass runs at least this often
# Set once every token created before tokens had leases has one.
LEGACY_DONE = "migrations/token-leases"
# What the leader follows: the schedule (its full storage prefix, and its folder inside the
# view) and the leases of tokens, whose ids end in `h<hmac of the token>`.
EXPIRE = "sys/expire/"
SCHEDULE = EXPIRE + "at/"
_TOKEN_LEASE = re.compile(r"(?:id|ns/[^/]+/id)/.+/h[0-9a-f]{64}(?:\.[^/]+)?")


class LeaseEntry(msgspec.Struct, kw_only=True):
    lease_id: str
    path: str  # request path inside the namespace, with the mount
    namespace_id: str
    mount_path: str
    secret_type: str
    internal: dict[str, Any] = {}
    issue_time: float
    expire_time: float
    last_renewal: float = 0.0
    max_expire_time: float = 0.0
    renewable: bool = True
    token: str = ""  # hmac of the token that created it; of the token itself for `auth`
    revoke_attempts: int = 0
    # The lease of a token (Vault's auth lease): revoking it revokes the token tree.
    auth: bool = False


class Scheduled(msgspec.Struct, kw_only=True):
    kind: str  # "lease" or "token"
    ref: str  # lease id, or token hmac
    namespace_id: str = "root"
    due: float


def _h(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:32]


def _namespace_of(lease_id: str) -> str:
    """Vault suffixes the ids of leases issued in a child namespace with `.<namespace id>`;
    random parts and salted token ids never hold a dot."""
    last = lease_id.rsplit("/", 1)[-1]
    return last.rsplit(".", 1)[1] if "." in last else "root"


def _folder(namespace_id: str) -> str:
    # Each namespace lists only its own leases, as Vault's per-namespace lease views do.
    return "id/" if namespace_id == "root" else f"ns/{namespace_id}/id/"


def _key(lease_id: str) -> str:
    return _folder(_namespace_of(lease_id)) + lease_id


def _slot(due: float, ref: str) -> str:
    # Rounded up: when a slot's second has passed, everything in it has expired. Clamped at 0:
    # a due time before the epoch (a huge negative TTL) would write "-…" names the expiry loop
    # cannot parse, and one such name stalled every expiry behind it.
    sec = max(0, math.ceil(due))
    return f"{sec // 60:012d}/{sec:012d}-{_h(ref)}"


class ExpirationManager:
    def __init__(self, core: Core, is_leader: Callable[[], bool] = lambda: True) -> None:
        self.core = core
        self.is_leader = is_leader
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._stopping = False
        # The leader's copy of the schedule, kept by following the schedule's part of the KV
        # stream (every replica's writes, in log order); no follower while not the leader.
        self._index = ExpiryIndex()
        # The index's names that come from token leases: name -> lease key in the view, and back.
        self._derived: dict[str, str] = {}
        self._derived_at: dict[str, str] = {}
        self._follower: asyncio.Task[None] | None = None
        self._loaded = asyncio.Event()

    @property
    def view(self):  # type: ignore[no-untyped-def]
        return self.core.barrier.view("sys/expire/")

    # ---- registration -------------------------------------------------------------------
    async def register(
        self,
        *,
        path: str,
        namespace_id: str,
        mount_path: str,
        secret_type: str,
        internal: dict[str, Any],
        ttl: int,
        max_ttl: int,
        renewable: bool,
        token: str,
    ) -> LeaseEntry:
        now = time.time()
        lease_id = f"{path.rstrip('/')}/{random_b62()}"
        lease = LeaseEntry(
            lease_id=lease_id if namespace_id == "root" else f"{lease_id}.{namespace_id}",
            path=path,
            namespace_id=namespace_id,
            mount_path=mount_path,
            secret_type=secret_type,
            internal=internal,
            issue_time=now,
            expire_time=now + ttl,
            max_expire_time=now + max_ttl if max_ttl else 0.0,
            renewable=renewable,
            token=token,
        )
        await self.view.put_obj(_key(lease.lease_id), lease)
        if token:
            await self.view.put(f"token/{token}/{_h(lease.lease_id)}", lease.lease_id.encode())
        await self._schedule("lease", lease.lease_id, lease.expire_time, namespace_id)
        return lease

    async def _schedule(self, kind: str, ref: str, due: float, namespace_id: str) -> None:
        name = _slot(due, ref)
        await self.view.put_obj(
            f"at/{name}", Scheduled(kind=kind, ref=ref, namespace_id=namespace_id, due=due)
        )
        if self._follower is not None:
            # At once, rather than when the stream delivers it: it may be due already.
            self._index.add(name)
        if due - time.time() < PASS_SECONDS:  # due before the next regular pass
            self._wake.set()

    async def _unschedule(self, name: str) -> None:
        with contextlib.suppress(Exception):
            await self.view.delete(f"at/{name}")
            self._index.discard(name)

    # ---- the leases of tokens -----------------------------------------------------------
    def auth_lease_id(self, entry: TokenEntry, token_hash: str = "") -> str:
        lease_id = f"{entry.path.strip('/')}/h{token_hash or self.core.tokens.hash(entry.id)}"
        return lease_id if entry.namespace_id == "root" else f"{lease_id}.{entry.namespace_id}"

    async def register_auth(self, entry: TokenEntry, mount_path: str) -> LeaseEntry:
        """The lease of a new token; the leader schedules the token's expiry from it."""
        token_hash = self.core.tokens.hash(entry.id)
        lease = LeaseEntry(
            lease_id=self.auth_lease_id(entry, token_hash),
            path=entry.path,
            namespace_id=entry.namespace_id,
            mount_path=mount_path,
            secret_type="",
            issue_time=entry.creation_time,
            expire_time=entry.expire_time,
            renewable=entry.renewable,
            token=token_hash,
            auth=True,
        )
        await self.view.put_obj(_key(lease.lease_id), lease)
        self._written(lease)
        return lease

    async def renewed_auth(self, entry: TokenEntry) -> bool:
        """Mirror a token renewal into its lease; False when the token has none."""
        lease = await self.get(self.auth_lease_id(entry))
        if lease is None or not lease.auth:
            return False
        lease.expire_time = entry.expire_time
        lease.last_renewal = time.time()
        await self.view.put_obj(_key(lease.lease_id), lease)
        self._written(lease)
        return True

    def _written(self, lease: LeaseEntry) -> None:
        if self._follower is not None:
            # At once, rather than when the stream delivers it: it may be due already.
            self._track(_key(lease.lease_id), lease)
            if lease.expire_time and lease.expire_time - time.time() < PASS_SECONDS:
                self._wake.set()

    def _track(self, key: str, lease: LeaseEntry) -> None:
        """Schedule the token of the lease at `key` by the lease's expiry (replacing any older)."""
        self._untrack(key)
        if lease.auth and lease.expire_time:
            name = _slot(lease.expire_time, lease.lease_id)
            self._derived[name] = key
            self._derived_at[key] = name
            self._index.add(name)

    def _untrack(self, key: str) -> None:
        name = self._derived_at.pop(key, None)
        if name is not None:
            del self._derived[name]
            self._index.discard(name)

    async def forget_auth(self, entry: TokenEntry) -> None:
        """Drop a revoked token's lease (the token store calls this while revoking)."""
        await self.view.delete(_key(self.auth_lease_id(entry)))

    async def lease_legacy_tokens(self) -> int:
        """Once per cluster: give a lease to every token created before tokens had leases, so
        disabling its auth mount or revoking its prefix reaches it too. Returns how many."""
        if await self.view.get(LEGACY_DONE) is not None:
            return 0
        added = 0
        for ns in list(self.core.namespaces.by_id.values()):
            tv = self.core.namespaces.view(ns).sub("sys/token/")
            for key in await tv.list("id/"):
                entry = await tv.get_obj(f"id/{key}", TokenEntry)
                if entry is None or await self.get(self.auth_lease_id(entry)) is not None:
                    continue
                await self.register_auth(entry, self.core.tokens.mount_of(entry))
                if await tv.get(f"id/{key}") is None:  # revoked meanwhile: no ghost lease
                    await self.forget_auth(entry)
                    continue
                added += 1
        await self.view.put(LEGACY_DONE, b"1")
        return added

    async def register_token(self, entry: TokenEntry) -> None:
        if entry.expire_time:
            await self._schedule(
                "token", self.core.tokens.hash(entry.id), entry.expire_time, entry.namespace_id
            )

    async def forget_token(self, entry: TokenEntry) -> None:
        if entry.expire_time:
            await self._unschedule(_slot(entry.expire_time, self.core.tokens.hash(entry.id)))

    # ---- lookups ------------------------------------------------------------------------
    async def get(self, lease_id: str) -> LeaseEntry | None:
        return await self.view.get_obj(_key(lease_id), LeaseEntry)

    async def list_prefix(self, prefix: str, namespace_id: str = "root") -> list[str]:
        """One level of a namespace's lease tree (its own leases only)."""
        return await self.view.list(_folder(namespace_id) + prefix)

    async def all_under(self, prefix: str, namespace_id: str = "root") -> list[str]:
        ids = [prefix + k for k in await self.view.list_all(_folder(namespace_id) + prefix)]
        if namespace_id != "root":
            # Leases of a child namespace issued before ids carried the namespace live with
            # the root's; the caller filters them by namespace.
            ids += [prefix + k for k in await self.view.list_all(_folder("root") + prefix)]
        return ids

    # ---- renew / revoke -----------------------------------------------------------------
    async def renew(self, lease: LeaseEntry, increment: int) -> LeaseEntry:
        now = time.time()
        backend = self.core.backend_for_lease(lease)
        ttl = increment or int(lease.expire_time - lease.issue_time)
        if backend is not None:
            st = backend.secret_types.get(lease.secret_type)
            if st is not None and st.renew is not None:
                ttl = await st.renew(lease.internal, ttl)
        new_expire = now + ttl
        if lease.max_expire_time:
            new_expire = min(new_expire, lease.max_expire_time)
        old_slot = _slot(lease.expire_time, lease.lease_id)
        lease.expire_time = new_expire
        lease.last_renewal = now
        await self.view.put_obj(_key(lease.lease_id), lease)
        await self._unschedule(old_slot)
        await self._schedule("lease", lease.lease_id, new_expire, lease.namespace_id)
        return lease

    async def revoke(self, lease: LeaseEntry, *, force: bool = False) -> None:
        """Ask the backend to revoke, then forget the lease. With force, forget it even when
        the backend fails. The lease of a token revokes the token and its children."""
        if lease.auth:
            await self._revoke_token_of(lease)
            await self.view.delete(_key(lease.lease_id))
            return
        backend = self.core.backend_for_lease(lease)
        if backend is not None:
            st = backend.secret_types.get(lease.secret_type)
            if st is not None:
                try:
                    await st.revoke(lease.internal)
                except Exception:
                    if not force:
                        raise
                    log.warning("forced revoke ignored a backend failure", lease=lease.lease_id)
        await self.view.delete(_key(lease.lease_id))
        if lease.token:
            await self.view.delete(f"token/{lease.token}/{_h(lease.lease_id)}")
        await self._unschedule(_slot(lease.expire_time, lease.lease_id))

    async def _revoke_token_of(self, lease: LeaseEntry) -> None:
        ns = self.core.namespaces.by_id.get(lease.namespace_id)
        if ns is None:
            return
        tv = self.core.namespaces.view(ns).sub("sys/token/")
        entry = await tv.get_obj(f"id/{lease.token}", TokenEntry)
        if entry is not None:
            await self.core.tokens.revoke_tree(entry)

    async def revoke_prefix(
        self, prefix: str, *, force: bool = False, namespace_id: str | None = None
    ) -> int:
        """Vault's revoke-prefix: without a trailing slash, the lease with exactly that id if
        there is one, else the prefix as a folder. Only leases of `namespace_id` (when given)
        are touched. Without force the first backend failure stops the walk and raises."""
        if prefix and not prefix.endswith("/"):
            exact = await self.get(prefix)
            if exact is not None and namespace_id in (None, exact.namespace_id):
                await self.revoke(exact, force=force)
                return 1
            prefix += "/"
        count = 0
        for lease_id in await self.all_under(prefix, namespace_id or "root"):
            lease = await self.get(lease_id)
            if lease is None or namespace_id not in (None, lease.namespace_id):
                continue  # gone meanwhile (a parent token's revocation took it), or not ours
            await self.revoke(lease, force=force)
            count += 1
        return count

    async def revoke_by_token(self, token_hash: str) -> None:
        for key in await self.view.list(f"token/{token_hash}/"):
            raw = await self.view.get(f"token/{token_hash}/{key}")
            if raw is None:
                continue
            lease = await self.get(raw.decode())
            if lease is not None:
                with contextlib.suppress(Exception):
                    await self.revoke(lease, force=True)
            await self.view.delete(f"token/{token_hash}/{key}")

    # ---- the leader's loop --------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            # Python 3.11's wait_for can swallow a cancel that races a wake-up: the flag makes
            # the loop end regardless.
            self._stopping = True
            self._wake.set()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(asyncio.shield(task), 5)
            self._stopping = False
        await self._unfollow()

    async def _run(self) -> None:
        migrated = False
        while not self._stopping:
            try:
                if self.is_leader() and not self.core.barrier.sealed:
                    if not migrated:
                        added = await self.lease_legacy_tokens()
                        if added:
                            log.info("leases given to tokens issued before leases", count=added)
                        migrated = True
                    if await self._follow():
                        await self.tick(time.time())
                    await rotation.maybe_auto_rotate(self.core)
                    await oidc_rotation.rotate_due_keys(self.core)
                else:
                    await self._unfollow()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("expiry pass failed")
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), PASS_SECONDS)

    # ---- the leader's copy of the schedule ----------------------------------------------
    async def _follow(self) -> bool:
        """Follow the schedule (again, from scratch, if the follower ended); True once the
        index holds everything storage held when following began."""
        if self._follower is not None and self._follower.done():
            await self._unfollow()
        if self._follower is None:
            self._follower = asyncio.create_task(self._follow_schedule())
        return self._loaded.is_set()

    async def _unfollow(self) -> None:
        task, self._follower = self._follower, None
        if task is not None:
            task.cancel()
            # A cancel can be swallowed inside nats-py's watcher (3.11's wait_for) or its stop
            # can hang on a dead connection: never wait for it for long. An abandoned follower
            # sees it is no longer current and ends at its next change without touching the index.
            await asyncio.wait({task}, timeout=2.0)
        self._loaded.clear()
        self._index.clear()
        self._derived.clear()
        self._derived_at.clear()

    async def _follow_schedule(self) -> None:
        me = asyncio.current_task()
        try:
            async for change in self.core.storage.watch(EXPIRE):
                if self._follower is not me:
                    return
                if not change.key:  # every name storage held is in: the index is exact
                    self._loaded.set()
                    self._wake.set()
                elif change.key.startswith(SCHEDULE):
                    if change.value is None:
                        self._index.discard(change.key[len(SCHEDULE) :])
                    else:
                        self._index.add(change.key[len(SCHEDULE) :])
                elif _TOKEN_LEASE.fullmatch(key := change.key[len(EXPIRE) :]):
                    await self._follow_token_lease(key, change.key, change.value)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # NATS gone for a while: the next pass follows afresh
            log.warning("following the expiry schedule failed", error=str(exc))

    async def _follow_token_lease(self, key: str, path: str, value: bytes | None) -> None:
        if value is None:
            self._untrack(key)
            return
        try:
            lease = msgspec.json.decode(
                await self.core.barrier.decrypt(path, value), type=LeaseEntry
            )
        except Exception as exc:  # one unreadable lease must not stop the schedule
            log.warning("a token lease could not be read", error=type(exc).__name__)
            return
        self._track(key, lease)

    async def tick(self, now: float) -> int:
        """Process everything due at `now`; returns how many entries were handled."""
        done = 0
        for name in self._index.due(now):
            key = self._derived.get(name)
            if key is not None:
                await self._expire_token_lease(key, now)
                done += 1
                continue
            item = await self.view.get_obj(f"at/{name}", Scheduled)
            if item is None:  # gone already (unscheduled by another replica)
                self._index.discard(name)
                continue
            if item.due > now:  # only a name that did not parse: file it where it belongs
                await self._schedule(item.kind, item.ref, item.due, item.namespace_id)
            else:
                await self._expire(item, now)
                done += 1
            await self.view.delete(f"at/{name}")
            self._index.discard(name)
        return done

    async def _expire_token_lease(self, key: str, now: float) -> None:
        """Expire the token of the lease at `key`, whose expiry has come."""
        lease = await self.view.get_obj(key, LeaseEntry)
        if lease is None or not lease.auth or lease.expire_time > now:
            # Gone, or renewed (the stream may not have told us yet).
            if lease is None:
                self._untrack(key)
            else:
                self._track(key, lease)
            return
        ns = self.core.namespaces.by_id.get(lease.namespace_id)
        tv = None if ns is None else self.core.namespaces.view(ns).sub("sys/token/")
        entry = None if tv is None else await tv.get_obj(f"id/{lease.token}", TokenEntry)
        if entry is None:
            await self.view.delete(key)  # the token is gone: its lease goes with it
        elif entry.expired(now):
            await self.core.tokens.revoke_tree(entry)  # its lease too
        else:
            # The token outlived its lease's copy of its expiry: bring the copy up to date.
            lease.expire_time = entry.expire_time
            await self.view.put_obj(key, lease)
            self._track(key, lease)
            return
        self._untrack(key)

    async def _expire(self, item: Scheduled, now: float) -> None:
        if item.kind == "lease":
            lease = await self.get(item.ref)
            if lease is None or lease.expire_time > now:
                return  # renewed (it has a later schedule entry) or already gone
            try:
                await self.revoke(lease)
            except Exception:
                lease.revoke_attempts += 1
                if lease.revoke_attempts >= MAX_REVOKE_ATTEMPTS:
                    log.error("lease is irrevocable", lease=lease.lease_id)
                    await self.view.put_obj(_key(lease.lease_id), lease)
                    return
                backoff = 10 * 2 ** (lease.revoke_attempts - 1)
                await self.view.put_obj(_key(lease.lease_id), lease)
                await self._schedule("lease", lease.lease_id, now + backoff, lease.namespace_id)
            return
        ns = self.core.namespaces.by_id.get(item.namespace_id)
        if ns is None:
            return
        tv = self.core.namespaces.view(ns).sub("sys/token/")
        entry = await tv.get_obj(f"id/{item.ref}", TokenEntry)
        if entry is not None and entry.expired(now):
            await self.core.tokens.revoke_tree(entry)
