"""KV v2 `subkeys`: the shape of a secret with every value replaced by null."""

from __future__ import annotations

from typing import Any

# Vault's hard limit, so a deeply nested secret cannot blow the stack.
MAX_DEPTH = 100


def subkeys(data: dict[str, Any], depth: int = 0) -> dict[str, Any]:
    """Non-empty objects are walked; leaves, empty objects and anything at `depth` (1 = top
    level; 0 = no limit) become null."""
    limit = depth if 0 < depth <= MAX_DEPTH else MAX_DEPTH

    def walk(obj: dict[str, Any], level: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in obj.items():
            if isinstance(value, dict) and value and level < limit:
                out[key] = walk(value, level + 1)
            else:
                out[key] = None
        return out

    return walk(data, 1)
