"""Encryption at rest for what the workspace service keeps that holds secrets (state files,
output values, variable values): the shared sealing (shared/sealing.py) under the workspace's
data keys, with key failures answered as JSON:API 503s."""

from __future__ import annotations

from services.workspace.jsonapi import ApiError
from shared import sealing
from shared.bus import Bus
from shared.sealing import VERSION, Fetch, seal, unseal
from shared.service_identity import ServiceKey

__all__ = ["STATE_KEY", "VARIABLES_KEY", "VERSION", "Keys", "bus_fetch", "seal", "unseal"]

STATE_KEY = "workspace/state"
VARIABLES_KEY = "workspace/variables"


def bus_fetch(bus: Bus, cluster: str, key: ServiceKey, timeout: float = 10.0) -> Fetch:
    """Fetch a named data key from the secrets service over the bus, as the workspace service."""
    return sealing.bus_fetch(bus, cluster, key, timeout)


class Keys(sealing.Keys):
    async def get(self, name: str) -> bytes:
        try:
            return await super().get(name)
        except sealing.KeyUnavailable as exc:
            if exc.reason == "the secrets service sent an unusable data key":
                raise ApiError(503, exc.reason) from None
            raise ApiError(
                503,
                "the encryption key for stored states and variables is not available "
                f"(is the secrets service running and unsealed?): {exc.reason}",
            ) from None
