"""Each replica publishes its public state (shared/secrets_state.py) for the gateway, which
answers sys/health, sys/seal-status and sys/leader from it: at once when it changes (the core
says so; anything else is checked every POLL seconds), and every HEARTBEAT seconds so the
gateway can tell a live replica from a gone one. A replica that stops says so, so the gateway
stops answering for it at once."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING

import nats.errors
import structlog

from shared import subjects
from shared.secrets_state import SecretsState, StateRecord, sign

if TYPE_CHECKING:
    from services.secrets.core.core import Core
    from services.secrets.core.seal import SealConfig

log = structlog.get_logger("secrets")

POLL = 0.1
# Well inside the gateway's staleness limit (services/gateway/local_status.py).
HEARTBEAT = 1.0


def current_state(core: Core, stored: SealConfig | None = None) -> SecretsState:
    """What sys/health, sys/seal-status and sys/leader answer on this replica now; `stored`:
    the seal config read from storage, where this replica has not loaded one yet."""
    cfg = core.seal.config or stored
    sealed = core.sealed
    return SecretsState(
        initialized=cfg is not None,
        sealed=sealed,
        seal_type=cfg.type if cfg else "shamir",
        threshold=cfg.secret_threshold if cfg else 0,
        shares=cfg.secret_shares if cfg else 0,
        progress=core.seal.progress,
        nonce=core.seal.nonce,
        recovery_seal=cfg is not None and cfg.type == "static",
        dr_mode=core.replication_mode(),
        # A sealed replica tells nobody its cluster (as the answers do not).
        cluster_name="" if sealed else core.settings.cluster_name,
        cluster_id="" if sealed else core.cluster_id,
    )


class StatePublisher:
    def __init__(self, core: Core) -> None:
        key = core.seal.identity.signing_key
        assert key is not None  # SealManager refuses to start without the cluster key
        self.core = core
        self._key = key
        self._cluster = core.settings.cluster_name
        self._subject = subjects.SECRETS_STATE.on(self._cluster)
        self._seq = 0
        self._last: SecretsState | None = None
        self._stored: SealConfig | None = None
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()

    def start(self) -> None:
        self.core.state_changed = self._changed.set
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None  # the loop ends at its next turn, cancel or not
        if task is not None:
            task.cancel()
            await asyncio.wait({task}, timeout=2 * POLL + 5)
        # Gone: the gateway forwards from now on instead of waiting for the record to go stale.
        with contextlib.suppress(nats.errors.Error, OSError):
            await self._publish(None)

    async def _publish(self, state: SecretsState | None) -> None:
        self._seq += 1
        record = StateRecord(
            node=self.core.seal.node_id, seq=self._seq, at=time.time(), state=state
        )
        await self.core.bus.nc.publish(self._subject, sign(self._key, self._cluster, record))
        self._last = state

    async def _run(self) -> None:
        sent = -HEARTBEAT
        while self._task is not None:
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow the cancel of stop().
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(POLL):
                    await self._changed.wait()
            self._changed.clear()
            try:
                beat = time.monotonic() - sent >= HEARTBEAT
                if beat and self.core.seal.config is None:
                    # Initialised through another replica? Read, never adopt: adopting could
                    # undo an init running on this one.
                    with contextlib.suppress(nats.errors.Error, TimeoutError):
                        self._stored = await self.core.seal.read_config()
                state = current_state(self.core, self._stored)
                if beat or state != self._last:
                    await self._publish(state)
                    sent = time.monotonic()
            except nats.errors.Error:
                pass  # disconnected: the gateway sees the state go stale and forwards
            except Exception:
                log.exception("publishing the secrets state failed")
