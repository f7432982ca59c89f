"""The gateway's channels to the API services: each end-to-end encrypted to the replicas that
prove they hold the key the cluster key (which the gateway pins) certified for that service
(shared/api_session.py, shared/service_identity.py). One code path for every service."""

from __future__ import annotations

from typing import Protocol

import structlog

from shared.api_session import SessionClient
from shared.bus import Bus
from shared.cluster_identity import IdentityError, load_identity
from shared.errors import ServiceError
from shared.messages import HttpRequest, HttpResponse
from shared.settings import Settings
from shared.subjects import Subject

log = structlog.get_logger("gateway")


class Channel(Protocol):
    async def call(
        self, env: HttpRequest, *, timeout: float, request_id: str = "", caller: str = ""
    ) -> HttpResponse: ...


class Unpinned:
    """No cluster key to pin: never send an API request in the clear."""

    def __init__(self, service: str, why: str) -> None:
        self.service = service
        self.why = why

    async def call(
        self, env: HttpRequest, *, timeout: float, request_id: str = "", caller: str = ""
    ) -> HttpResponse:
        raise ServiceError(503, f"the gateway cannot reach the {self.service} service: {self.why}")


def service_channel(bus: Bus, settings: Settings, service: str, api: Subject) -> Channel:
    """The sealed channel to `service`, whose API subject is `api`."""
    try:
        identity = load_identity(settings)
    except IdentityError as exc:
        log.warning("API disabled", service=service, reason=str(exc))
        return Unpinned(service, str(exc))
    return SessionClient(
        bus,
        settings.cluster_name,
        service,
        api.on(settings.cluster_name),
        identity.public_key,
        batch=settings.bus_batch,
    )
