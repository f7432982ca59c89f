"""The Core: one per secrets replica. It owns the barrier and the managers and keeps each
namespace's mount table with live backends. Changes made on one replica reach the others by an
invalidation broadcast (and a reload after any NATS reconnect)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import msgspec
import structlog

from services.secrets import registry
from services.secrets.core import rotation
from services.secrets.core.barrier import Barrier
from services.secrets.core.encryption_counts import EncryptionCounts
from services.secrets.core.expiration import ExpirationManager, LeaseEntry
from services.secrets.core.mounts import MountEntry, MountTable, MountTableDoc, new_entry
from services.secrets.core.namespaces import Namespace, NamespaceStore
from services.secrets.core.plans import RequestPlans
from services.secrets.core.policies import PolicyStore
from services.secrets.core.seal import SealManager
from services.secrets.core.tokens import TokenStore
from services.secrets.core.wrapping import WrappingManager
from services.secrets.errors import bad_request
from services.secrets.keyring import Keyring
from services.secrets.system import version_history_paths
from shared import subjects
from shared.storage import Storage

if TYPE_CHECKING:
    from services.secrets.framework.backend import Backend
    from shared.bus import Bus
    from shared.settings import Settings

log = structlog.get_logger("core")

# Mounts every namespace has; they cannot be disabled or moved.
SYSTEM_MOUNTS = {
    "sys/": "system",
    "cubbyhole/": "cubbyhole",
    "identity/": "identity",
    "auth/token/": "token",
}


# Seconds a request waits for another replica's announced change to be applied here.
SETTLE_TIMEOUT = 10.0


class Invalidate(msgspec.Struct, kw_only=True):
    what: str
    origin: str


class Core:
    def __init__(
        self,
        bus: Bus,
        settings: Settings,
        storage: Storage,
        is_leader: Callable[[], bool] = lambda: True,
    ) -> None:
        self.bus = bus
        self.settings = settings
        self.storage = storage
        self.barrier = Barrier(storage)
        self.barrier.on_unknown_term = lambda: rotation.reload_keyring(self)
        self.namespaces = NamespaceStore(self.barrier)
        self.seal = SealManager(self)
        self.encryption_counts = EncryptionCounts(self)
        self.tokens = TokenStore(self)
        self.policies = PolicyStore(self)
        self.expiration = ExpirationManager(self, is_leader)
        self.wrapping = WrappingManager(self)
        self.tables: dict[str, MountTable] = {}
        self.plans = RequestPlans()
        self._reload_lock = asyncio.Lock()
        self.cluster_id = ""
        # True once unsealed AND the mount tables are loaded: until then requests see "sealed".
        self.active = False
        self.dr_mode = "disabled"
        self._sealed_sys: Backend | None = None
        # Called when what sys/health and sys/seal-status answer may have changed, so the
        # published state follows at once (core/state_publisher.py).
        self.state_changed: Callable[[], None] = lambda: None
        # A reload the mount tables owe an invalidation from another replica: requests that
        # arrive after the invalidation wait for it (dispatch.handle_http), so a client that
        # changed a mount through one replica finds the change on every other.
        self.reloading: asyncio.Future[None] | None = None
        self._invalidations = 0
        # Other invalidations being applied here that requests wait for too (a keyring term).
        self.applying: set[asyncio.Future[None]] = set()

    @property
    def sealed(self) -> bool:
        """Sealed as clients see it: the barrier is closed or the tables are not loaded yet."""
        return self.barrier.sealed or not self.active

    def replication_mode(self) -> str:
        return self.dr_mode

    def sealed_system_backend(self) -> Backend:
        """The sys backend that answers while sealed (init, unseal, status, health)."""
        if self._sealed_sys is None:
            cls = registry.backend_class("system", auth=False)
            assert cls is not None
            self._sealed_sys = cls(self, None, self.barrier.view(""))
        return self._sealed_sys

    async def first_unseal(self, keyring: Keyring) -> str:
        """Right after init: unseal this replica, create the cluster id, the default mounts and
        the root token; seal again unless the seal unseals by itself."""
        self.seal.initializing = True
        try:
            self.barrier.unseal(keyring)
            view = self.barrier.view("")
            await view.put("core/cluster-id", str(uuid.uuid4()).encode())
            await self.post_unseal()
            await self.ensure_initial_mounts()
            root = await self.tokens.create_root()
            if self.seal.config is not None and self.seal.config.type != "static":
                await self.pre_seal()
                self.barrier.seal()
        finally:
            # Only once sealed again: until then no peer may take the keyring.
            self.seal.initializing = False
        if self.seal.config is None or self.seal.config.type == "static":
            await self.seal.announce_unsealed()
        return root

    # ---- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        # Applied as the bus client reads it, before any request that arrived after it: the
        # writer published it before its reply.
        await self.bus.listen(
            subjects.SEAL_CHANGED.on(self.settings.cluster_name), self._invalidated
        )
        await self.encryption_counts.start()
        # DR mode first (issue 5): a DR secondary must not unseal by itself and write.
        from services.replication.link import link_of

        await link_of(self).start()
        await self.seal.start()
        if self.dr_mode == "secondary" and not self.barrier.sealed:
            await self.seal.seal(broadcast=False)

    async def stop(self) -> None:
        await self.seal.stop()
        link = getattr(self, "dr_link", None)
        if link is not None:
            await link.stop()
        await self.expiration.stop()

    async def post_unseal(self) -> None:
        raw = await self.barrier.view("").get("core/cluster-id")
        self.cluster_id = raw.decode() if raw else ""
        await self.tokens.load_salt()
        await rotation.remember_root_key(self)
        await self.reload()
        if self.dr_mode != "secondary":  # a DR secondary revokes nothing: its primary does
            self.expiration.start()
            await version_history_paths.record(self)
        self.active = True
        self.state_changed()

    async def pre_seal(self) -> None:
        self.active = False
        self.state_changed()
        self.seal.root_key = None
        self.tokens.invalidate_local()
        await self.expiration.stop()
        self.tables.clear()
        self.plans.clear()
        self.policies.invalidate()

    async def reload(self) -> None:
        """Re-read namespaces and mount tables (after an invalidation or a reconnect)."""
        async with self._reload_lock:
            await self.namespaces.load()
            tables: dict[str, MountTable] = {}
            for ns in list(self.namespaces.by_id.values()):
                tables[ns.id] = await self._load_table(ns)
            self.tables = tables
            self.policies.invalidate()

    async def broadcast_invalidate(self, what: str) -> None:
        if what == "policies":
            self.policies.invalidate()
        await self.seal.broadcast(
            subjects.SEAL_CHANGED, Invalidate(what=what, origin=self.seal.node_id)
        )

    def _invalidated(self, data: bytes) -> None:
        """Another replica changed cached state. Sealed by a replica, or ignored; what can be
        dropped is dropped here and now, what must be re-read is re-read before the next
        request is served (`reloading`)."""
        subject = subjects.SEAL_CHANGED.on(self.settings.cluster_name)
        msg = self.seal.open_broadcast(subject, data, Invalidate)
        if msg is None or msg.origin == self.seal.node_id or self.barrier.sealed:
            return
        if msg.what.startswith("token:"):
            self.tokens.invalidate_local(msg.what[len("token:") :])
        elif msg.what == "policies":
            self.policies.invalidate()
        elif msg.what == rotation.INVALIDATION:
            # sys/key-status after sys/rotate must show the new term on every replica.
            self._apply(rotation.reload_keyring(self))
        elif msg.what == "seal-config":
            # A rekey elsewhere: the next share must be counted against the new threshold.
            self._apply(self._reload_seal_config())
        elif msg.what.startswith("identity:"):
            from services.secrets.identity.access import invalidated as identity_invalidated

            identity_invalidated(self, msg.what[len("identity:") :])
        elif msg.what.startswith("transit:"):
            from services.secrets.engines.transit.backend import invalidated

            invalidated(self, msg.what)
        else:
            self._invalidations += 1
            if self.reloading is None:
                self.reloading = asyncio.ensure_future(self._reload_until_current())
                # Logged there; retrieved here so an unawaited failure is not reported again.
                self.reloading.add_done_callback(lambda f: f.cancelled() or f.exception())

    async def settle(self) -> None:
        """Wait (bounded) for what other replicas announced before this request arrived: a
        mount-table reload, a keyring term, a seal or an unseal being applied here."""
        pending: list[asyncio.Future[None]] = [*self.seal.transitions, *self.applying]
        if self.reloading is not None:
            pending.append(self.reloading)
        await asyncio.wait(pending, timeout=SETTLE_TIMEOUT)

    async def _reload_seal_config(self) -> None:
        await self.seal.load_config()
        self.state_changed()

    def _apply(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self.applying.add(task)
        task.add_done_callback(self.applying.discard)
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _reload_until_current(self) -> None:
        """Reload until no invalidation arrived during the last reload."""
        try:
            while True:
                seen = self._invalidations
                await self.reload()
                if seen == self._invalidations:
                    return
        except Exception:
            # Storage unreachable: the next request that misses a mount reads the tables
            # itself (refresh_if_stale); waiting requests answer 503.
            log.warning("reloading the mount tables failed", exc_info=True)
            raise
        finally:
            self.reloading = None

    # ---- mounts ---------------------------------------------------------------------------
    def _table_key(self, auth: bool) -> str:
        return "core/auth" if auth else "core/mounts"

    async def _read_doc(self, ns: Namespace, auth: bool) -> tuple[MountTableDoc, int]:
        got = await self.namespaces.view(ns).get_obj_entry(self._table_key(auth), MountTableDoc)
        return got if got is not None else (MountTableDoc(), 0)

    async def _doc_revisions(self, ns: Namespace) -> tuple[int, int]:
        view = self.namespaces.view(ns)
        out = []
        for auth in (False, True):
            got = await view.get_entry(self._table_key(auth))
            out.append(got[1] if got else 0)
        return out[0], out[1]

    async def refresh_if_stale(self, ns: Namespace) -> bool:
        """A request found no mount: if the stored tables moved on since we loaded them (an
        invalidation still in flight), reload now. One storage read per miss."""
        current = self.tables.get(ns.id)
        if current is not None and await self._doc_revisions(ns) == current.revisions:
            return False
        self.tables[ns.id] = await self._load_table(ns)
        return True

    async def refresh_namespaces(self) -> None:
        """An unknown namespace: re-read the namespace list and load tables of new ones."""
        await self.namespaces.load()
        for nsid, ns in list(self.namespaces.by_id.items()):
            if nsid not in self.tables:
                self.tables[nsid] = await self._load_table(ns)

    async def _load_table(self, ns: Namespace) -> MountTable:
        table = MountTable()
        table.revisions = await self._doc_revisions(ns)
        for path, type_ in SYSTEM_MOUNTS.items():
            entry = MountEntry(
                path=path,
                type=type_,
                uuid=f"{ns.id}-{type_}",
                accessor=f"{type_}_{ns.id}",
                namespace_id=ns.id,
                description=_SYSTEM_DESCRIPTIONS[type_],
            )
            table.set(entry, await self._instantiate(ns, entry))
        for auth in (False, True):
            doc, _ = await self._read_doc(ns, auth)
            for entry in doc.entries:
                try:
                    table.set(entry, await self._instantiate(ns, entry))
                except Exception:
                    log.exception("cannot start mount", path=entry.path, type=entry.type)
        return table

    async def _instantiate(self, ns: Namespace, entry: MountEntry) -> Backend:
        cls = registry.backend_class(entry.type, auth=entry.is_auth)
        if cls is None:
            factory = await self.plugin_backend(entry)
            if factory is None:
                raise bad_request(f"plugin not found in the catalog: {entry.type}")
            return factory
        view = self.namespaces.view(ns).sub(entry.storage_prefix())
        backend = cls(self, entry, view)
        await backend.initialize()
        return backend

    async def plugin_backend(self, entry: MountEntry) -> Backend | None:
        """External plugins (the plugin catalog) hook in here."""
        from services.secrets.plugins.mounting import plugin_backend

        return await plugin_backend(self, entry)

    def table(self, ns: Namespace) -> MountTable:
        return self.tables.get(ns.id) or MountTable()

    async def mount(
        self, ns: Namespace, path: str, type_: str, *, auth: bool, **kw: object
    ) -> MountEntry:
        full = ("auth/" if auth else "") + path.strip("/") + "/"
        if (
            full in SYSTEM_MOUNTS
            or full.startswith(("sys/", "cubbyhole/", "identity/"))
            or (not auth and full.startswith("auth/"))
        ):
            raise bad_request(f"cannot mount at {full!r}: the path is reserved")
        if type_ == "identity":  # one per namespace, at identity/ (as OpenBao)
            raise bad_request(f'mount type of "{type_}" is not mountable')
        if (
            registry.backend_class(type_, auth=auth) is None
            and await self.plugin_backend(MountEntry(path=full, type=type_)) is None
        ):
            kind = "auth method" if auth else "secrets engine"
            raise bad_request(f"unknown {kind} type: {type_}")
        table = self.table(ns)
        clash = table.conflicts(full)
        if clash:
            raise bad_request(f"path is already in use at {clash}")
        entry = new_entry(full, type_, namespace_id=ns.id, **kw)
        backend = await self._instantiate(ns, entry)
        await self._change_doc(ns, auth, lambda doc: doc.entries.append(entry))
        table.set(entry, backend)
        await self.broadcast_invalidate("mounts")
        return entry

    async def _change_doc(
        self, ns: Namespace, auth: bool, change: Callable[[MountTableDoc], object]
    ) -> None:
        view = self.namespaces.view(ns)
        key = self._table_key(auth)
        for _ in range(50):
            doc, rev = await self._read_doc(ns, auth)
            change(doc)
            data = msgspec.json.encode(doc)
            try:
                if rev:
                    await view.update(key, data, rev)
                else:
                    await view.create(key, data)
                return
            except Exception:
                await asyncio.sleep(0.01)
        raise bad_request("the mount table is changing too fast; try again")

    async def unmount(self, ns: Namespace, path: str, *, auth: bool) -> None:
        full = ("auth/" if auth else "") + path.strip("/") + "/"
        if full in SYSTEM_MOUNTS:
            raise bad_request(f"cannot unmount {full!r}")
        table = self.table(ns)
        if full not in table.entries:
            return
        # Leases of this namespace only (another namespace may have a mount at the same path);
        # for an auth method these are the leases of its tokens, whose trees go with them.
        await self.expiration.revoke_prefix(full, force=True, namespace_id=ns.id)
        await self._change_doc(ns, auth, lambda doc: _drop(doc, full))
        backend = table.remove(full)
        if backend is not None:
            await backend.cleanup()
            await backend.storage.delete_all()
        await self.broadcast_invalidate("mounts")

    async def update_mount(self, ns: Namespace, entry: MountEntry) -> None:
        def replace(doc: MountTableDoc) -> None:
            doc.entries = [entry if e.path == entry.path else e for e in doc.entries]

        await self._change_doc(ns, entry.is_auth, replace)
        table = self.table(ns)
        backend = table.backends.get(entry.path)
        if backend is not None:
            backend.mount = entry
            table.set(entry, backend)
        await self.broadcast_invalidate("mounts")

    async def remount(self, ns: Namespace, src: str, dst: str) -> MountEntry:
        table = self.table(ns)
        src = src.strip("/") + "/"
        dst = dst.strip("/") + "/"
        entry = table.entries.get(src)
        if entry is None:
            raise bad_request(f"no mount at {src!r}")
        if src in SYSTEM_MOUNTS or src.startswith("auth/") != dst.startswith("auth/"):
            raise bad_request(f"cannot move {src!r} to {dst!r}")
        clash = table.conflicts(dst)
        if clash and clash != src:
            raise bad_request(f"path is already in use at {clash}")
        moved = msgspec.structs.replace(entry, path=dst)
        # As Vault: leases (and the tokens of an auth method) do not move with the mount; they
        # are revoked, so no token or dynamic secret lives on under a path that is gone.
        await self.expiration.revoke_prefix(src, force=True, namespace_id=ns.id)

        def change(doc: MountTableDoc) -> None:
            doc.entries = [moved if e.path == src else e for e in doc.entries]

        await self._change_doc(ns, entry.is_auth, change)
        backend = table.remove(src)
        if backend is not None:
            backend.mount = moved
            table.set(moved, backend)
        await self.broadcast_invalidate("mounts")
        return moved

    async def reload_namespace(self, ns: Namespace) -> None:
        self.tables[ns.id] = await self._load_table(ns)
        await self.broadcast_invalidate("mounts")

    async def delete_namespace(self, ns: Namespace) -> None:
        await self.namespaces.delete(ns)
        self.tables.pop(ns.id, None)
        await self.broadcast_invalidate("mounts")

    def backend_for_lease(self, lease: LeaseEntry) -> Backend | None:
        ns = self.namespaces.by_id.get(lease.namespace_id)
        if ns is None:
            return None
        return self.table(ns).backends.get(lease.mount_path)

    async def ensure_initial_mounts(self) -> None:
        """A fresh install has a KV version 2 engine at secret/ (the seed's rule 2)."""
        from services.secrets.core.namespaces import ROOT

        with contextlib.suppress(Exception):
            await self.mount(
                ROOT,
                "secret",
                "kv",
                auth=False,
                options={"version": "2"},
                description="key/value secret storage",
            )


def _drop(doc: MountTableDoc, path: str) -> None:
    doc.entries = [e for e in doc.entries if e.path != path]


_SYSTEM_DESCRIPTIONS = {
    "system": "system endpoints used for control, policy and debugging",
    "cubbyhole": "per-token private secret storage",
    "identity": "identity store",
    "token": "token based credentials",
}
