"""Readiness of one listener: the gateway itself serves, its bus is connected, and the service
behind the listener answers a cheap request over the bus (any answer below 500 counts: a
sealed secrets service must stay reachable, or no one could unseal it), and so do the services
it relies on (the secrets service reports its crypto workers) and the other services its API
needs (NEEDS: the workspace and scheduler APIs need an unsealed secrets service). Probes are
shared and cached for a moment, so a burst of readiness checks costs one round of bus requests.
Services a deployment may legitimately not run (DR replication, client agents, the scheduler
behind the workspace's remote runs, which wait for it) are not asked (README, Operating it)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from services.gateway.apis import SCHEDULER, SECRETS, WORKSPACE
from services.gateway.secure import service_channel
from shared.bus import Bus
from shared.errors import ServiceError
from shared.messages import HttpRequest, HttpResponse
from shared.settings import Settings

# What each API is asked: (path, query). Vault's Helm chart probes health the same way.
PROBES: dict[str, tuple[str, str]] = {
    "secrets": ("/v1/sys/health", "standbyok=true&sealedcode=204&uninitcode=204"),
    "workspace": ("/api/v2/ping", ""),
    "scheduler": ("/v1/status/leader", ""),
}
# What the service behind a listener is asked of the services it relies on in turn (the secrets
# service of its crypto workers): a 503 there makes the listener unready, naming what is down.
BEHIND: dict[str, tuple[str, str]] = {"secrets": ("/v1/sys/internal/readiness", "")}
# The services each listener's API needs beside its own, asked as NEEDED asks them: the
# workspace and scheduler services seal states and variables under data keys that only an
# unsealed secrets service hands out (shared/sealing.py).
NEEDS: dict[str, tuple[str, ...]] = {"workspace": ("secrets",), "scheduler": ("secrets",)}
# Only 200 counts here: sealed (503) or uninitialised (501) cannot hand out a data key.
NEEDED: dict[str, tuple[str, str]] = {"secrets": ("/v1/sys/health", "standbyok=true")}
_NEEDED_WHY = {501: "not initialized", 503: "sealed"}
PROBE_TIMEOUT = 2.0
CACHE_SECONDS = 1.0

Send = Callable[[HttpRequest, float], Awaitable[HttpResponse]]


@dataclass
class ServiceProbe:
    api: str
    send: Send
    needed: bool = False  # asked as a service another listener's API needs (NEEDED)
    _checked_at: float = -1e9
    _last: dict[str, Any] = field(default_factory=dict)
    _inflight: asyncio.Future[dict[str, Any]] | None = None

    async def check(self) -> dict[str, Any]:
        """{"name", "ready", "status" or "error"} for the service behind this listener."""
        if time.monotonic() - self._checked_at < CACHE_SECONDS and self._last:
            return self._last
        if self._inflight is None:
            self._inflight = asyncio.ensure_future(self._probe())
        inflight = self._inflight
        try:
            return await asyncio.shield(inflight)
        finally:
            if inflight.done() and self._inflight is inflight:
                self._inflight = None

    async def _probe(self) -> dict[str, Any]:
        path, query = (NEEDED if self.needed else PROBES)[self.api]
        env = HttpRequest(method="GET", path=path, query=query, request_id="readyz")
        result: dict[str, Any] = {"name": self.api}
        try:
            reply = await self.send(env, PROBE_TIMEOUT)
            if self.needed:
                result.update(ready=reply.status == 200, status=reply.status)
                if reply.status in _NEEDED_WHY:
                    result["error"] = _NEEDED_WHY[reply.status]
            else:
                result.update(ready=reply.status < 500, status=reply.status)
            if result["ready"] and self.api in BEHIND and not self.needed:
                result["behind"] = behind = await self._behind()
                result["ready"] = all(s.get("ready") for s in behind)
        except ServiceError as exc:
            # 503: no replica subscribed; 504: none answered in time.
            result.update(ready=False, error=f"{exc.code}: no replica answered")
        except Exception as exc:  # whatever fails, the listener cannot serve this API now
            result.update(ready=False, error=type(exc).__name__)
        self._last, self._checked_at = result, time.monotonic()
        return result

    async def _behind(self) -> list[dict[str, Any]]:
        path, query = BEHIND[self.api]
        env = HttpRequest(method="GET", path=path, query=query, request_id="readyz")
        reply = await self.send(env, PROBE_TIMEOUT)
        if reply.status == 404:
            return []  # a replica from before the path existed reports nothing behind it
        try:
            services = msgspec.json.decode(reply.body)["services"]
        except (msgspec.DecodeError, KeyError, TypeError):
            return [{"name": path, "ready": False, "error": f"{reply.status}: unreadable answer"}]
        return [s for s in services if isinstance(s, dict)]


def needed_probes(bus: Bus, settings: Settings) -> dict[str, ServiceProbe]:
    """One probe per service some listener's API needs (NEEDS), shared by those listeners,
    each over its own sealed channel (the API envelopes never cross the bus in the clear)."""
    subjects = {api.name: api.subject for api in (SECRETS, WORKSPACE, SCHEDULER)}
    probes: dict[str, ServiceProbe] = {}
    for name in sorted({n for needs in NEEDS.values() for n in needs}):
        channel = service_channel(bus, settings, name, subjects[name])

        async def send(env: HttpRequest, timeout: float, channel: Any = channel) -> HttpResponse:
            return await channel.call(env, timeout=timeout, request_id="readyz", caller="gateway")

        probes[name] = ServiceProbe(name, send, needed=True)
    return probes
