"""How the secrets engine asks a crypto worker for work: a typed request in the crypto queue
group with an explicit timeout. A worker that dies mid-request costs a retry, then a 503."""

from __future__ import annotations

from typing import Any

from services.crypto.messages import CryptoRequest, CryptoResult
from shared import subjects
from shared.bus import Bus
from shared.errors import BusTimeout, NoResponders, ServiceError

RETRIES = 2


async def crypto_call(
    bus: Bus, cluster: str, op: str, args: dict[str, Any], *, timeout: float = 60.0
) -> Any:
    """Run `op` on a crypto worker; its refusals come back as ServiceError(400, message)."""
    subject = subjects.CRYPTO.on(cluster)
    last: ServiceError | None = None
    for _ in range(RETRIES + 1):
        try:
            reply = await bus.request(
                subject, CryptoRequest(op=op, args=args), CryptoResult, timeout=timeout
            )
            return reply.result
        except (NoResponders, BusTimeout) as exc:
            # Every op is a pure function of its arguments: re-sending cannot do harm.
            last = exc
    assert last is not None
    raise ServiceError(503, f"no crypto worker could complete {op}: {last.message}")
