"""Read-modify-write of one stored object with compare-and-set, so concurrent writers on any
replica never lose each other's updates (the pattern of userpass and approle, for methods
whose entries are plain msgspec structs)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import msgspec

from services.secrets.errors import bad_request
from shared.storage import CasConflict

if TYPE_CHECKING:
    from services.secrets.core.barrier import BarrierView

T = TypeVar("T", bound=msgspec.Struct)
ATTEMPTS = 20


async def change(storage: BarrierView, key: str, kind: type[T], fn: Callable[[T | None], T]) -> T:
    """Apply `fn(current or None) -> new` and store the result; `fn` may raise a 400."""
    for _ in range(ATTEMPTS):
        got = await storage.get_obj_entry(key, kind)
        new = fn(got[0] if got else None)
        raw = msgspec.json.encode(new)
        try:
            if got is None:
                await storage.create(key, raw)
            else:
                await storage.update(key, raw, got[1])
            return new
        except CasConflict:
            await asyncio.sleep(0.005)
    raise bad_request(f"{key.split('/')[0]} is being changed concurrently; try again")
