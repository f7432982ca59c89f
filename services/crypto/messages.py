"""Wire types between the secrets engine and crypto workers."""

from __future__ import annotations

from typing import Any

import msgspec


class CryptoRequest(msgspec.Struct, kw_only=True):
    op: str
    args: dict[str, Any] = {}


class CryptoResult(msgspec.Struct, kw_only=True):
    result: Any = None
