"""`Core.plugin_backend`: turn a mount of a catalogued plugin into a live backend. One plugin
process per mount per replica (the copies share the mount's queue group); processes are
started on first use, restarted (re-verified) if they die, and stopped when their mount goes
away, the replica seals or its bus closes."""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from services.secrets.framework.backend import Backend
from services.secrets.plugins import runner
from services.secrets.plugins.catalog import CatalogEntry, catalog, resolve_command
from services.secrets.plugins.proxy import PluginBackend
from shared.plugin_sdk import storage_subject

if TYPE_CHECKING:
    from services.secrets.core.mounts import MountEntry

log = structlog.get_logger("plugins")

REAP_INTERVAL = 2.0
# A process is young while its mount may not be in the table yet (mount() starts the backend
# before it stores the entry).
REAP_GRACE = 10.0


@dataclass
class Running:
    uuid: str
    prefix: str
    process: runner.PluginProcess
    backend: PluginBackend | None = None
    subscription: Any = None
    missing: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def stop(self) -> None:
        if self.subscription is not None:
            with contextlib.suppress(Exception):
                await self.subscription.unsubscribe()
            self.subscription = None
        await self.process.stop()


class PluginManager:
    def __init__(self, core: Any) -> None:
        self.core = core
        self.running: dict[str, Running] = {}
        self._reaper: asyncio.Task[None] | None = None

    def _prefix(self, entry: MountEntry) -> str:
        return f"{self.core.settings.cluster_name}.plugin.{entry.uuid}"

    async def backend(self, entry: MountEntry) -> Backend | None:
        if entry.is_auth:
            return None  # only secrets-engine plugins run out of process so far
        found = await catalog(self.core).get("secret", entry.type)
        if found is None:
            return None
        full = resolve_command(self.core.settings.plugin_directory, found.command)
        if not entry.uuid:
            # Core.mount asks whether the type exists before it creates the entry: answer
            # with the checks (a tampered binary is refused here) but start nothing.
            await runner.verify_sha256(found, full)
            return Backend(self.core, entry, self.core.barrier.view("plugin-probe/"))
        current = self.running.get(entry.uuid)
        if current is not None and current.process.alive and \
                current.process.sha256 == found.sha256 and current.backend is not None:
            current.backend.mount = entry
            return current.backend
        if current is not None:
            await self._forget(entry.uuid)
        return await self._start(entry, found, full)

    async def _start(self, entry: MountEntry, found: CatalogEntry, full: str) -> PluginBackend:
        prefix = self._prefix(entry)
        process = await runner.start(self.core.bus.nc, found, full, self.core.settings.nats_url,
                                     prefix)
        entry.running_sha256 = process.sha256
        entry.plugin_version = entry.plugin_version or found.version
        ns = self.core.namespaces.by_id.get(entry.namespace_id)
        if ns is None:
            await process.stop()
            return None  # type: ignore[return-value]
        view = self.core.namespaces.view(ns).sub(entry.storage_prefix())
        run = Running(uuid=entry.uuid, prefix=prefix, process=process)

        async def ensure_running() -> None:
            await self._ensure(entry.uuid)

        async def on_cleanup() -> None:
            await self._forget(entry.uuid)

        backend = PluginBackend(self.core, entry, view, process.info, prefix,
                                ensure_running, on_cleanup)
        run.backend = backend
        # Any replica may answer a plugin's storage call: they share one barrier.
        run.subscription = await self.core.bus.nc.subscribe(
            storage_subject(prefix), queue="secrets", cb=backend.on_storage)
        self.running[entry.uuid] = run
        self._start_reaper()
        return backend

    async def _ensure(self, uuid: str) -> None:
        """Restart a plugin that died, checking its binary again first."""
        run = self.running.get(uuid)
        if run is None or run.process.alive or run.backend is None:
            return
        async with run.lock:
            if run.process.alive:
                return
            entry = run.backend.mount
            assert entry is not None
            found = await catalog(self.core).get("secret", entry.type)
            if found is None:
                from services.secrets.errors import bad_request

                raise bad_request(f"plugin {entry.type!r} is no longer in the catalog")
            full = resolve_command(self.core.settings.plugin_directory, found.command)
            log.warning("plugin exited; restarting", plugin=entry.type,
                        code=run.process.proc.returncode)
            run.process = await runner.start(self.core.bus.nc, found, full,
                                             self.core.settings.nats_url, run.prefix)

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
        while self.running:
            await asyncio.sleep(REAP_INTERVAL)
            try:
                if self.core.bus.nc.is_closed:
                    for uuid in list(self.running):
                        await self._forget(uuid)
                    return
                live = self._live_uuids()
                now = time.monotonic()
                for uuid, run in list(self.running.items()):
                    if uuid in live or now - run.process.started < REAP_GRACE:
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
