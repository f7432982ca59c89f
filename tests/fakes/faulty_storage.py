"""Storage writes that fail on purpose: a test's way to see what a half-done change leaves."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import nats.errors


@contextlib.contextmanager
def failing_writes(storage: Any, marker: str) -> Iterator[list[str]]:
    """While open, every put or create on `storage` of a key containing `marker` fails as a
    storage timeout does (nothing written); yields the keys refused so far."""
    refused: list[str] = []
    originals = {name: getattr(storage, name) for name in ("put", "create")}

    def failing(name: str) -> Any:
        async def write(key: str, *args: Any, **kwargs: Any) -> int:
            if marker in key:
                refused.append(key)
                raise nats.errors.TimeoutError
            return await originals[name](key, *args, **kwargs)

        return write

    for name in originals:
        setattr(storage, name, failing(name))
    try:
        yield refused
    finally:
        for name in originals:
            delattr(storage, name)
