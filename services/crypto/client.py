"""How the secrets engine asks a crypto worker for work: a typed request in the crypto queue
group with an explicit timeout. A worker that dies mid-request costs a retry, then a 503.

Commands and results carry private keys: both travel sealed under the crypto workers' channel
key (shared/cluster_identity.py), so a NATS subscriber reads nothing, a worker obeys only the
secrets cluster, and a reply opens only for the request it answers."""

from __future__ import annotations

from typing import Any

import msgspec

from services.crypto.messages import CryptoReply, CryptoRequest
from shared import subjects
from shared.bus import Bus
from shared.control import CRYPTO, ControlBox, Rejected
from shared.errors import BusTimeout, NoResponders, ServiceError

RETRIES = 2

# cluster name -> the box sealing its crypto commands (registered by the secrets service).
_BOXES: dict[str, ControlBox] = {}


def register_crypto_key(cluster: str, key: bytes) -> None:
    if cluster not in _BOXES:
        _BOXES[cluster] = ControlBox(key, CRYPTO, window=120.0)


def crypto_box(cluster: str) -> ControlBox:
    box = _BOXES.get(cluster)
    if box is None:
        raise ServiceError(503, "this process holds no crypto channel key for the cluster")
    return box


async def crypto_call(
    bus: Bus, cluster: str, op: str, args: dict[str, Any], *, timeout: float = 60.0
) -> Any:
    """Run `op` on a crypto worker; its refusals come back as ServiceError(400, message)."""
    subject = subjects.CRYPTO.on(cluster)
    box = crypto_box(cluster)
    plain = msgspec.msgpack.encode(CryptoRequest(op=op, args=args))
    last: ServiceError | None = None
    for _ in range(RETRIES + 1):
        # A fresh box per attempt: the workers refuse a nonce they have seen.
        request = box.seal(subject, plain)
        try:
            sealed = await bus.request(subject, request, bytes, timeout=timeout)
        except msgspec.DecodeError:
            raise ServiceError(
                502, f"the crypto reply to {op} was not sealed by a worker"
            ) from None
        except (NoResponders, BusTimeout) as exc:
            # Every op is a pure function of its arguments: re-sending cannot do harm.
            last = exc
            continue
        try:
            reply = msgspec.msgpack.decode(
                box.open(ControlBox.reply_context(subject, request), sealed), type=CryptoReply
            )
        except (Rejected, msgspec.DecodeError):
            raise ServiceError(
                502, f"the crypto reply to {op} was not sealed by a worker"
            ) from None
        if reply.error_code:
            raise ServiceError(reply.error_code, reply.error_message)
        return reply.result
    assert last is not None
    raise ServiceError(503, f"no crypto worker could complete {op}: {last.message}")
