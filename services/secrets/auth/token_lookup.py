"""The data block of a token lookup, rendered to JSON once per token entry.

Every field but `ttl` is fixed while an entry object lives: the token cache shares one entry
between requests, and the only change made to an entry in place afterwards is a renewal, which
moves `expire_time`. So the JSON is kept as the two halves around the remaining TTL, keyed by
the entry object and its expiry, and a lookup costs a concatenation instead of building and
encoding seventeen fields (two of them ISO timestamps).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from services.secrets.core.tokens import TokenEntry

MAX_ENTRIES = 4096
_enc = msgspec.json.Encoder()


class LookupRenderer:
    """Kept in memory only, by the token backend of one mount (dropped with it on seal)."""

    def __init__(self, build: Callable[[TokenEntry, bool], dict[str, Any]]) -> None:
        self._build = build
        # id(entry), include_id -> (entry, its expire_time, JSON before the ttl, JSON after).
        # Holding the entry keeps its id from being reused while it is cached.
        self._rendered: dict[tuple[int, bool], tuple[TokenEntry, float, bytes, bytes]] = {}

    def render(self, entry: TokenEntry, *, include_id: bool) -> msgspec.Raw:
        key = (id(entry), include_id)
        hit = self._rendered.get(key)
        if hit is None or hit[0] is not entry or hit[1] != entry.expire_time:
            head, tail = self._halves(entry, include_id)
            if len(self._rendered) >= MAX_ENTRIES:
                self._rendered.clear()
            hit = self._rendered[key] = (entry, entry.expire_time, head, tail)
        return msgspec.Raw(b"%b%d%b" % (hit[2], entry.remaining(), hit[3]))

    def _halves(self, entry: TokenEntry, include_id: bool) -> tuple[bytes, bytes]:
        data = self._build(entry, include_id)
        keys = list(data)
        at = keys.index("ttl")
        head = _enc.encode({k: data[k] for k in keys[:at]})
        tail = _enc.encode({k: data[k] for k in keys[at + 1 :]})
        # {"a":1} + {"b":2} around the ttl -> {"a":1,"ttl":N,"b":2} (tail is never empty: type).
        return head[:-1] + b',"ttl":', b"," + tail[1:]
