"""Key objects (AEAD ciphers, private and public keys, derived keys) built from a key's versions,
kept on the copy of the key they came from.

Building one costs more than the operation it serves (loading an Ed25519 or EC private key
computes its public point, a derived key runs a KDF). The backend's cache holds one copy of a key
at a time, and every change (rotate, config, trim, delete, restore, another replica's
invalidation, the cache's age limit) replaces or drops that copy: the objects go with it, so
none outlives the version it was built from, and none leaves this process's memory.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from services.secrets.engines.transit.policy import Policy

T = TypeVar("T")
# Across every copy: derived keys are kept per context, and contexts are the client's choice.
MAX_OBJECTS = 8192

_holders: list[weakref.ref[Policy]] = []
_made = 0  # objects built since the last _drop_all, dead copies' included


def kept(p: Policy, key: Hashable, build: Callable[..., T], *args: Any) -> T:
    """`build(*args)`, made once per copy of `p` and `key`."""
    global _made
    memo: dict[Hashable, Any] | None = p.__dict__.get("_objects")
    if memo is not None and key in memo:
        return memo[key]  # type: ignore[no-any-return]
    if _made >= MAX_OBJECTS:
        _drop_all()
        memo = None
    if memo is None:
        memo = p.__dict__["_objects"] = {}
        _holders.append(weakref.ref(p))
    made = memo[key] = build(*args)
    _made += 1
    return made


def _drop_all() -> None:
    """Forget every kept object (the bound is reached; they are rebuilt as requests need them)."""
    global _made
    for ref in _holders:
        p = ref()
        if p is not None:
            p.__dict__.pop("_objects", None)
    _holders.clear()
    _made = 0
