"""The gateway's channel to the secrets cluster: end-to-end encrypted to the replicas that
prove they hold the cluster key the gateway pins (shared/api_session.py)."""

from __future__ import annotations

from typing import Protocol

import structlog

from shared import subjects
from shared.api_session import SessionClient
from shared.bus import Bus
from shared.cluster_identity import IdentityError, load_identity
from shared.errors import ServiceError
from shared.messages import HttpRequest, HttpResponse
from shared.settings import Settings

log = structlog.get_logger("gateway")


class Channel(Protocol):
    async def call(
        self, env: HttpRequest, *, timeout: float, request_id: str = "", caller: str = ""
    ) -> HttpResponse: ...


class Unpinned:
    """No secrets cluster key to pin: never send a secrets request in the clear."""

    def __init__(self, why: str) -> None:
        self.why = why

    async def call(
        self, env: HttpRequest, *, timeout: float, request_id: str = "", caller: str = ""
    ) -> HttpResponse:
        raise ServiceError(503, f"the gateway cannot reach the secrets service: {self.why}")


def secrets_channel(bus: Bus, settings: Settings) -> Channel:
    try:
        identity = load_identity(settings)
    except IdentityError as exc:
        log.warning("secrets API disabled", reason=str(exc))
        return Unpinned(str(exc))
    subject = subjects.API_SECRETS.on(settings.cluster_name)
    return SessionClient(bus, settings.cluster_name, subject, identity.public_key)
