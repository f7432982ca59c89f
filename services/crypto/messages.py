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


class CryptoResult(msgspec.Struct, kw_only=True):
    result: Any = None


class CryptoReply(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What travels sealed back to the secrets service: a result or a refusal."""

    result: Any = None
    error_code: int = 0
    error_message: str = ""
    batch: list[CryptoReply] = []
    worker: str = ""  # the answering worker process (a random id): callers count workers by it
