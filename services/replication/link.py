"""The secrets service's side of DR: it follows the cluster's DR mode (from the replication
state bucket) so the dispatcher can gate a secondary and the seal can react, and it carries
`sys/replication/dr/*` commands to the replication service."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

import msgspec
import structlog

from services.replication.commands import DR_CONTROL, DrReply
from services.replication.modes import SECONDARY
from services.replication.state import (
    STATE_KEY,
    DrState,
    StateStore,
    bucket_for,
)
from shared.control import ControlBox, Rejected
from shared.errors import NoResponders, ServiceError

if TYPE_CHECKING:
    from services.secrets.core.core import Core

log = structlog.get_logger("replication.link")

COMMAND_TIMEOUT = 60.0  # secondary enable unwraps over HTTP, probes and wipes


class DrLink:
    def __init__(self, core: Core) -> None:
        self.core = core
        self.state = DrState()
        self.store: StateStore | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        settings = self.core.settings
        key = self.core.seal.identity.state_key
        assert key is not None  # the secrets service holds the whole cluster identity
        self.store = await StateStore.open(
            self.core.bus.nc.jetstream(),
            bucket_for(settings, "dr"),
            key,
            replicas=settings.replicas,
        )
        self.state = await self.store.load()
        self.core.dr_mode = self.state.mode
        self._task = asyncio.create_task(self._follow())

    async def refresh(self) -> None:
        """Read the DR state now rather than when the watch delivers it (after a command that
        changed it, before acting on the new mode)."""
        assert self.store is not None
        state = await self.store.load()
        if state.mode != self.state.mode or state.generation != self.state.generation:
            await self._changed(state)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None

    async def _follow(self) -> None:
        assert self.store is not None
        while True:
            try:
                watcher = await self.store.kv.watch(STATE_KEY)
                try:
                    async for entry in watcher:
                        if entry is not None and entry.value:
                            try:
                                state = self.store.decode_state(entry.value)
                            except ServiceError as exc:  # forged on the bus: never obeyed
                                log.warning("DR state refused", reason=exc.message)
                                continue
                            await self._changed(state)
                finally:
                    with contextlib.suppress(Exception):
                        await watcher.stop()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("following the DR state failed; retrying", error=str(exc))
                await asyncio.sleep(1.0)

    async def _changed(self, new: DrState) -> None:
        old, self.state = self.state, new
        core = self.core
        core.dr_mode = new.mode
        if new.mode == SECONDARY:
            # A secondary's storage holds its primary's ciphertext: nothing here may read it
            # or write to it (leases, tokens) until it is promoted or disabled.
            if not core.barrier.sealed:
                await core.seal.seal(broadcast=False)
        elif old.mode != new.mode or old.generation != new.generation:
            await core.seal.reload()

    async def request(self, cmd: Any, wait: float = COMMAND_TIMEOUT) -> DrReply:
        subject = DR_CONTROL.on(self.core.settings.cluster_name)
        # Commands carry operation tokens and key shares: sealed for the replication service,
        # which obeys only a box from a secrets replica; the reply is sealed back to us.
        box = self.core.seal.box
        request = box.seal(subject, msgspec.msgpack.encode(cmd))
        try:
            sealed = await self.core.bus.request(subject, request, bytes, timeout=wait)
        except NoResponders:
            raise ServiceError(
                503, "the replication service is not running on this cluster"
            ) from None
        except msgspec.DecodeError:
            raise ServiceError(502, "the DR reply was not sealed by this cluster") from None
        try:
            plain = box.open(ControlBox.reply_context(subject, request), sealed)
        except Rejected:
            raise ServiceError(502, "the DR reply was not sealed by this cluster") from None
        return msgspec.msgpack.decode(plain, type=DrReply)


def link_of(core: Core) -> DrLink:
    """The core's link (made on first use where the core was built without one)."""
    link = getattr(core, "dr_link", None)
    if link is None:
        link = DrLink(core)
        core.dr_link = link  # type: ignore[attr-defined]
    return link
