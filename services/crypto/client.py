"""How the secrets engine asks a crypto worker for work: a typed request in the crypto queue
group with an explicit timeout. A worker that dies mid-request costs a retry, then a 503.

Commands and results carry private keys: both travel sealed under the crypto workers' channel
key (shared/cluster_identity.py), so a NATS subscriber reads nothing, a worker obeys only the
secrets cluster, and a reply opens only for the request it answers."""

from __future__ import annotations

import functools
import weakref
from typing import Any

import msgspec

from services.crypto.batching import Batcher
from services.crypto.messages import CryptoReply, CryptoRequest
from services.crypto.shared_args import SharedArgs
from shared import subjects
from shared.bus import Bus
from shared.control import CRYPTO, ControlBox, Rejected
from shared.errors import BusTimeout, NoResponders, ServiceError

RETRIES = 2

# cluster name -> the box sealing its crypto commands (registered by the secrets service).
_BOXES: dict[str, ControlBox] = {}
# bus -> cluster -> the batcher coalescing that bus's concurrent calls (batching.py).
_BATCHERS: weakref.WeakKeyDictionary[Bus, dict[str, Batcher]] = weakref.WeakKeyDictionary()


def register_crypto_key(cluster: str, key: bytes) -> None:
    if cluster not in _BOXES:
        _BOXES[cluster] = ControlBox(key, CRYPTO, window=120.0)


def crypto_box(cluster: str) -> ControlBox:
    box = _BOXES.get(cluster)
    if box is None:
        raise ServiceError(503, "this process holds no crypto channel key for the cluster")
    return box


def _batcher(bus: Bus, cluster: str) -> Batcher:
    per_bus = _BATCHERS.setdefault(bus, {})
    batcher = per_bus.get(cluster)
    if batcher is None:
        batcher = per_bus[cluster] = Batcher(functools.partial(_send, bus, cluster))
    return batcher


async def crypto_call(
    bus: Bus,
    cluster: str,
    op: str,
    args: dict[str, Any],
    *,
    timeout: float = 60.0,
    shared: SharedArgs | None = None,
) -> Any:
    """Run `op` on a crypto worker with `args` over the `shared` ones (sent by reference, and
    in full only to a worker that does not hold them); its refusals come back as
    ServiceError(400, message)."""
    batcher = _batcher(bus, cluster)
    if shared is None:
        reply = await batcher.call(CryptoRequest(op=op, args=args), timeout)
    else:
        reply = await batcher.call(CryptoRequest(op=op, own=args, ref=shared.ref), timeout)
        if reply.unknown_ref:
            request = CryptoRequest(op=op, own=args, ref=shared.ref, shared=shared.raw)
            reply = await batcher.call(request, timeout)
    if reply.error_code:
        raise ServiceError(reply.error_code, reply.error_message)
    return reply.result


async def _send(
    bus: Bus, cluster: str, requests: list[CryptoRequest], timeout: float
) -> tuple[str, list[CryptoReply]]:
    """One sealed message to a worker carrying `requests` (alone or as a batch): the worker that
    answered, and the replies."""
    subject = subjects.CRYPTO.on(cluster)
    box = crypto_box(cluster)
    single = len(requests) == 1
    what = requests[0].op if single else f"a batch of {len(requests)} ops"
    plain = msgspec.msgpack.encode(requests[0] if single else CryptoRequest(batch=requests))
    last: ServiceError | None = None
    for _ in range(RETRIES + 1):
        # A fresh box per attempt: the workers refuse a nonce they have seen.
        request = box.seal(subject, plain)
        try:
            sealed = await bus.request(subject, request, bytes, timeout=timeout)
        except msgspec.DecodeError:
            raise ServiceError(
                502, f"the crypto reply to {what} was not sealed by a worker"
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
                502, f"the crypto reply to {what} was not sealed by a worker"
            ) from None
        replies = [reply] if single else reply.batch
        if len(replies) != len(requests):
            # A refusal of the whole message (an error reply) or a malformed answer.
            message = reply.error_message or f"no reply to {what}"
            raise ServiceError(reply.error_code or 502, message)
        return reply.worker, replies
    assert last is not None
    raise ServiceError(503, f"no crypto worker could complete {what}: {last.message}")
