"""`Core.plugin_backend`: turn a mount of a catalogued plugin into a live backend.

One plugin process per mount per replica; the copies share the mount's queue group. The
replica that mounts the plugin starts it at once (so a refused or broken binary fails the
mount) and records the paths it announced; other replicas, and this one after a restart, build
the backend from that record and start their copy on the first request. Every start checks
the binary's SHA-256 again. A process that dies is restarted on the next request; processes
stop when their mount goes away, the replica seals or its bus closes."""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec
import structlog

from services.secrets.errors import bad_request
from services.secrets.framework.backend import Backend
from services.secrets.plugins import runner
from services.secrets.plugins.catalog import CatalogEntry, catalog, resolve_command
from services.secrets.plugins.proxy import PluginBackend
from shared.plugin_sdk import PluginInfo, storage_subject

if TYPE_CHECKING:
    from services.secrets.core.barrier import BarrierView
    from services.secrets.core.mounts import MountEntry

log = structlog.get_logger("plugins")

REAP_INTERVAL = 2.0
CLOSED_CHECK = 0.25
# A mount is young while it may not be in the table yet (Core.mount builds the backend before
# it stores the entry).
REAP_GRACE = 10.0
INFO_PREFIX = "core/plugin-info/"


class CachedInfo(msgspec.Struct, kw_only=True):
    """What a plugin announced, recorded by the replica that mounted it."""

    sha256: str
    info: PluginInfo


@dataclass
class Running:
    uuid: str
    prefix: str
    process: runner.PluginProcess | None = None
    backend: PluginBackend | None = None
    subscription: Any = None
    created: float = field(default_factory=time.monotonic)
    missing: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.alive

    async def stop(self) -> None:
        if self.subscription is not None:
            with contextlib.suppress(Exception):
                await self.subscription.unsubscribe()
            self.subscription = None
        if self.process is not None:
            await self.process.stop()


class PluginManager:
    def __init__(self, core: Any) -> None:
        self.core = core
        self.running: dict[str, Running] = {}
        self._reaper: asyncio.Task[None] | None = None

    @property
    def _infos(self) -> BarrierView:
        return self.core.barrier.view(INFO_PREFIX)

    def _prefix(self, entry: MountEntry) -> str:
        return f"{self.core.settings.cluster_name}.plugin.{entry.uuid}"

    async def _start_process(self, found: CatalogEntry, prefix: str) -> runner.PluginProcess:
        full = resolve_command(self.core.settings.plugin_directory, found.command)
        return await runner.start(
            self.core.bus.nc,
            found,
            full,
            self.core.settings.nats_url,
            prefix,
            self.core.settings.plugin_nats_credentials_file,
        )

    async def backend(self, entry: MountEntry) -> Backend | None:
        if entry.is_auth:
            return None  # only secrets-engine plugins run out of process so far
        found = await catalog(self.core).get("secret", entry.type)
        if found is None:
            return None
        if not entry.uuid:
            # Core.mount asks whether the type exists before it creates the entry: answer
            # with the checks (a tampered binary is refused here) but start nothing.
            full = resolve_command(self.core.settings.plugin_directory, found.command)
            await runner.verify_sha256(found, full)
            return Backend(self.core, entry, self.core.barrier.view("plugin-probe/"))
        current = self.running.get(entry.uuid)
        if (
            current is not None
            and current.backend is not None
            and (current.process is None or current.process.sha256 == found.sha256)
        ):
            current.backend.mount = entry
            return current.backend
        if current is not None:  # re-registered with another binary: start afresh
            await self._forget(entry.uuid)
        ns = self.core.namespaces.by_id.get(entry.namespace_id)
        if ns is None:
            return None
        prefix = self._prefix(entry)
        run = Running(uuid=entry.uuid, prefix=prefix)
        cached = await self._infos.get_obj(entry.uuid, CachedInfo)
        if cached is not None and cached.sha256 == found.sha256:
            info = cached.info  # start on first use
        else:
            run.process = await self._start_process(found, prefix)
            info = run.process.info
            await self._infos.put_obj(entry.uuid, CachedInfo(sha256=run.process.sha256, info=info))
            entry.running_sha256 = run.process.sha256
            entry.plugin_version = entry.plugin_version or found.version
        view = self.core.namespaces.view(ns).sub(entry.storage_prefix())
        uuid = entry.uuid

        async def ensure_running(settle: float = 0.0) -> None:
            await self._ensure(uuid, settle)

        async def on_cleanup() -> None:
            await self._forget(uuid)
            await self._infos.delete(uuid)

        backend = PluginBackend(self.core, entry, view, info, prefix, ensure_running, on_cleanup)
        run.backend = backend
        # Any replica may answer a plugin's storage call: they share one barrier.
        run.subscription = await self.core.bus.nc.subscribe(
            storage_subject(prefix), queue="secrets", cb=backend.on_storage
        )
        self.running[uuid] = run
        self._start_reaper()
        return backend

    async def _ensure(self, uuid: str, settle: float = 0.0) -> None:
        """Start this replica's copy if it is not running, checking the binary first; with
        `settle`, first wait that long for a copy that looks alive to be seen to have ended."""
        run = self.running.get(uuid)
        if run is not None and run.process is not None and run.alive and settle:
            await run.process.settle(settle)
        if run is None or run.alive or run.backend is None:
            return
        async with run.lock:
            if run.alive:
                return
            entry = run.backend.mount
            assert entry is not None
            found = await catalog(self.core).get("secret", entry.type)
            if found is None:
                raise bad_request(f"plugin {entry.type!r} is no longer in the catalog")
            if run.process is not None:
                log.warning(
                    "plugin exited; restarting",
                    plugin=entry.type,
                    code=run.process.proc.returncode,
                )
            run.process = await self._start_process(found, run.prefix)

    async def _forget(self, uuid: str) -> None:
        run = self.running.pop(uuid, None)
        if run is not None:
            await run.stop()

    def _start_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.create_task(self._reap())

    def _live_uuids(self) -> set[str]:
        return {e.uuid for t in self.core.tables.values() for e in t.entries.values()}

    async def _reap(self) -> None:
        last_pass = time.monotonic()
        while self.running:
            # The bus closing (the replica stopping) is checked often: plugins must not
            # outlive their replica by much.
            await asyncio.sleep(CLOSED_CHECK)
            try:
                if self.core.bus.nc.is_closed:
                    for uuid in list(self.running):
                        await self._forget(uuid)
                    return
                now = time.monotonic()
                if now - last_pass < REAP_INTERVAL:
                    continue
                last_pass = now
                live = self._live_uuids()
                for uuid, run in list(self.running.items()):
                    if uuid in live or now - run.created < REAP_GRACE:
                        run.missing = 0
                        continue
                    run.missing += 1
                    if run.missing >= 2:  # gone in two passes: not a reload in progress
                        log.info("stopping plugin of a removed mount", uuid=uuid)
                        await self._forget(uuid)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("plugin reaper pass failed")


_managers: weakref.WeakKeyDictionary[Any, PluginManager] = weakref.WeakKeyDictionary()


def manager(core: Any) -> PluginManager:
    found = _managers.get(core)
    if found is None:
        found = _managers[core] = PluginManager(core)
    return found


async def plugin_backend(core: Any, entry: MountEntry) -> Backend | None:
    return await manager(core).backend(entry)
