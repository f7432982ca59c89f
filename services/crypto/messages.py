"""Wire types between the secrets engine and crypto workers."""

from __future__ import annotations

from typing import Any

import msgspec


class CryptoRequest(msgspec.Struct, kw_only=True, omit_defaults=True):
    op: str = ""
    args: dict[str, Any] = {}
    # Several requests in one message (services/crypto/batching.py), `op` empty: the worker runs
    # them in order and answers each in `CryptoReply.batch`.
    batch: list[CryptoRequest] = []
    # Arguments shared with other calls, by digest, and their msgpack bytes when the worker asked
    # for them (services/crypto/shared_args.py); the call's own then travel in `own`, not `args`,
    # so that a worker without this protocol refuses the call instead of running it incomplete.
    ref: str = ""
    shared: bytes = b""
    own: dict[str, Any] = {}


class CryptoResult(msgspec.Struct, kw_only=True):
    result: Any = None


class CryptoReply(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What travels sealed back to the secrets service: a result or a refusal."""

    result: Any = None
    error_code: int = 0
    error_message: str = ""
    batch: list[CryptoReply] = []
    worker: str = ""  # the answering worker process (a random id): callers count workers by it
    unknown_ref: bool = False  # the worker does not hold the request's `ref`: send `shared`
