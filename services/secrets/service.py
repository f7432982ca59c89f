"""The secrets service process: storage, the core, and the bus subscriptions."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

import nats.errors
import structlog

from services.secrets.core import datakeys
from services.secrets.core.core import Core
from services.secrets.core.dispatch import handle_http
from services.secrets.core.state_publisher import StatePublisher
from shared import subjects
from shared.api_session import serve_api
from shared.bus import Bus, CallContext
from shared.cluster_identity import load_identity
from shared.leader import LeaderLease
from shared.messages import HttpRequest, HttpResponse
from shared.service_identity import derive_service_key
from shared.settings import Settings
from shared.storage import JetStreamStorage

log = structlog.get_logger("secrets")

T = TypeVar("T")


def bucket_name(settings: Settings, suffix: str) -> str:
    return f"{settings.cluster_name}-{suffix}".replace(".", "-")


async def _retrying(step: Callable[[], Awaitable[T]], *, seconds: float = 60.0) -> T:
    """Run a start-up step again while JetStream answers with errors or not at all."""
    deadline = asyncio.get_running_loop().time() + seconds
    delay = 0.2
    while True:
        try:
            return await step()
        except (nats.errors.Error, TimeoutError) as exc:
            if asyncio.get_running_loop().time() + delay > deadline:
                raise
            log.warning("storage not ready; retrying", error=type(exc).__name__)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)


class SecretsService:
    name = "secrets"

    def __init__(self, bus: Bus, settings: Settings) -> None:
        self.bus = bus
        self.settings = settings
        self.core: Core | None = None
        self.lease: LeaderLease | None = None
        self.publisher: StatePublisher | None = None
        self._ready = False

    @property
    def ready(self) -> bool:
        return self._ready

    async def start(self) -> None:
        js = self.bus.nc.jetstream()
        # A JetStream API call may time out while the servers are busy (a start under load, a
        # server restarting): each start-up step is tried again rather than ending the replica.
        storage = await _retrying(
            lambda: JetStreamStorage.open(
                js,
                bucket_name(self.settings, "secrets"),
                replicas=self.settings.replicas,
                cache_feed=subjects.SECRETS_STORAGE_FEED.on(self.settings.cluster_name)
                if self.settings.storage_cache
                else "",
            )
        )
        leader_store = await _retrying(
            lambda: JetStreamStorage.open(
                js, bucket_name(self.settings, "leader"), replicas=self.settings.replicas
            )
        )
        self.core = core = Core(self.bus, self.settings, storage, is_leader=self._is_leader)
        self.lease = LeaderLease(leader_store.kv, "secrets-expiration", core.seal.node_id, ttl=6.0)
        await _retrying(self.lease.start)
        await _retrying(core.seal.load_config)  # storage answers before anything subscribes
        await core.start()

        def on_http(req: HttpRequest, ctx: CallContext) -> Awaitable[HttpResponse]:
            return handle_http(core, req)  # the coroutine itself: no wrapping frame per request

        async def on_echo(req: HttpRequest, ctx: CallContext) -> HttpResponse:
            return HttpResponse(status=200, body=b'{"echo":true}')

        cluster = self.settings.cluster_name
        # The API travels sealed end to end with the gateway (shared/api_session.py): a
        # handshake subject, and the API subject that takes only sealed envelopes.
        key = derive_service_key(load_identity(self.settings), "secrets")
        await serve_api(
            self.bus,
            key,
            cluster,
            subjects.API_SECRETS,
            on_http,
            concurrency=self.settings.concurrency,
        )
        await self.bus.serve(
            subjects.ECHO.on(cluster),
            on_echo,
            HttpRequest,
            queue=subjects.ECHO.queue,
            concurrency=self.settings.concurrency,
        )
        await datakeys.serve(core)
        self.publisher = StatePublisher(core)
        self.publisher.start()
        self._ready = True

    def health_detail(self) -> dict[str, bool]:
        """For /readyz: whether this replica serves requests yet (each replica unseals on its
        own, so `trellis dev` waits for every one of them)."""
        return {"sealed": self.core is None or self.core.sealed}

    def _is_leader(self) -> bool:
        return self.lease is not None and self.lease.is_leader

    async def stop(self) -> None:
        self._ready = False
        if self.publisher is not None:
            await self.publisher.stop()
        if self.core is not None:
            await self.core.stop()
        if self.lease is not None:
            with contextlib.suppress(Exception):
                await self.lease.stop()
