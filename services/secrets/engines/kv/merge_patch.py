"""JSON merge patch (RFC 7396), the semantics of KV v2's PATCH on data and custom metadata."""

from __future__ import annotations

from typing import Any


def merge_patch(target: Any, patch: Any) -> Any:
    """`target` with `patch` applied: objects merge key by key, null removes a key, anything else
    replaces. Neither argument is modified."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result
