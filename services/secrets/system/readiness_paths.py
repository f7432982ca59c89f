"""sys/internal/readiness: whether the services the secrets service relies on answer, for the
gateway's readiness probe of the secrets listener (services/gateway/readiness.py). Today that is
the crypto workers (PKI, SSH, transit's RSA and EC keys). Unauthenticated and answered while
sealed, as sys/health: it tells nothing but up or down."""

from __future__ import annotations

from typing import TYPE_CHECKING

from services.crypto.client import crypto_call
from services.secrets.framework.path import NoFields, Op, Operation, Path
from services.secrets.framework.request import Request, Response
from services.secrets.system.common import raw_json
from shared.errors import ServiceError

if TYPE_CHECKING:
    from services.secrets.core.core import Core

# Per try (the client tries three times): the whole answer must come within the gateway's
# PROBE_TIMEOUT of 2 s. A worker busy with a long key generation may miss it; another answers.
PING_TIMEOUT = 0.5


def paths(core: Core) -> list[Path]:
    async def readiness(req: Request, _: NoFields) -> Response:
        crypto: dict[str, object] = {"name": "crypto"}
        try:
            await crypto_call(
                core.bus, core.settings.cluster_name, "ping", {}, timeout=PING_TIMEOUT
            )
            crypto["ready"] = True
        except ServiceError as exc:
            crypto.update(ready=False, error=f"{exc.code}: {exc.message}")
        ready = bool(crypto["ready"])
        return raw_json({"ready": ready, "services": [crypto]}, status=200 if ready else 503)

    return [
        Path(
            "internal/readiness",
            {
                Op.READ: Operation(
                    readiness, "Readiness of the services behind", unauthenticated=True
                )
            },
            synopsis="Whether the crypto workers answer (for the gateway's readiness probe).",
        )
    ]
