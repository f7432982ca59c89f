"""Wire types between the secrets engine and crypto workers."""

from __future__ import annotations

from typing import Any

import msgspec


class CryptoRequest(msgspec.Struct, kw_only=True):
    op: str
    args: dict[str, Any] = {}


class CryptoResult(msgspec.Struct, kw_only=True):
    result: Any = None


class CryptoReply(msgspec.Struct, kw_only=True):
    """What travels sealed back to the secrets service: a result or a refusal."""

    result: Any = None
    error_code: int = 0
    error_message: str = ""
