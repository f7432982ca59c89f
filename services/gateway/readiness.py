"""Readiness of one listener: the gateway itself serves, its bus is connected, and the service
behind the listener answers a cheap request over the bus (any answer below 500 counts: a
sealed secrets service must stay reachable, or no one could unseal it), and so do the services
it relies on (the secrets service reports its crypto workers). Probes are shared and cached for
a moment, so a burst of readiness checks costs one round of bus requests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from shared.errors import ServiceError
from shared.messages import HttpRequest, HttpResponse

# What each API is asked: (path, query). Vault's Helm chart probes health the same way.
PROBES: dict[str, tuple[str, str]] = {
    "secrets": ("/v1/sys/health", "standbyok=true&sealedcode=204&uninitcode=204"),
    "workspace": ("/api/v2/ping", ""),
    "scheduler": ("/v1/status/leader", ""),
}
# What the service behind a listener is asked of the services it relies on in turn (the secrets
# service of its crypto workers): a 503 there makes the listener unready, naming what is down.
BEHIND: dict[str, tuple[str, str]] = {"secrets": ("/v1/sys/internal/readiness", "")}
PROBE_TIMEOUT = 2.0
CACHE_SECONDS = 1.0

Send = Callable[[HttpRequest, float], Awaitable[HttpResponse]]


@dataclass
class ServiceProbe:
    api: str
    send: Send
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
        path, query = PROBES[self.api]
        env = HttpRequest(method="GET", path=path, query=query, request_id="readyz")
        result: dict[str, Any] = {"name": self.api}
        try:
            reply = await self.send(env, PROBE_TIMEOUT)
            result.update(ready=reply.status < 500, status=reply.status)
            if result["ready"] and self.api in BEHIND:
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
