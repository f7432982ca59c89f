"""A per-replica cache of storage entries, kept exact by invalidations (shared/storage_feed.py
feeds it from the stream itself). This file is the bookkeeping only: what may be answered from
memory, and when a value read from storage may be kept.

Entries are the raw stored values (still barrier-encrypted) by encoded key, or None for a key
that is absent. An invalidation only drops: a value enters only as the result of a read from
storage (a fill), and only if nothing invalidated its key (or the whole cache) while that read
was in flight, so a read that raced a write never leaves the old value behind.

Every hit and fill also checks the connection the invalidations arrive on (`link`: a token that
changes on every reconnect, -1 while disconnected): invalidations sent while it was down are
lost, so a changed token drops everything and turns the cache off until the feed has checked
again (`lost`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shared.storage import Entry

MISS = object()  # lookup's answer when memory cannot answer
MAX_ENTRIES = 100_000
MAX_BYTES = 64 << 20
# Per-entry bookkeeping counted against MAX_BYTES besides the key and the value.
OVERHEAD = 200


class _Fill:
    """One read from storage in flight: it may install its answer only if `gen` of its key's
    cell and the cache's epoch are what they were when it started."""

    __slots__ = ("cell", "epoch", "gen", "key")

    def __init__(self, key: str, epoch: int, cell: list[int]) -> None:
        self.key = key
        self.epoch = epoch
        self.cell = cell  # [invalidations seen while fills of the key were in flight, fills]
        self.gen = cell[0]


class StorageCache:
    def __init__(
        self,
        link: Callable[[], int],
        lost: Callable[[], None],
        *,
        max_entries: int = MAX_ENTRIES,
        max_bytes: int = MAX_BYTES,
    ) -> None:
        self._link = link
        self._lost = lost
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, tuple[Entry | None, int]] = OrderedDict()
        self._bytes = 0
        self._fills: dict[str, list[int]] = {}
        self._epoch = 0
        self._conn = -1  # the link token the cache was turned on under; -1: off
        self.hits = 0

    @property
    def active(self) -> bool:
        return self._conn >= 0

    def activate(self, conn: int) -> None:
        """On, empty, for invalidations arriving on connection `conn` (the feed has checked
        that they all arrive there)."""
        self._drop()
        self._conn = conn

    def deactivate(self) -> None:
        self._drop()
        self._conn = -1

    def _drop(self) -> None:
        self._entries.clear()
        self._bytes = 0
        self._epoch += 1  # fills in flight keep nothing

    def _usable(self) -> bool:
        conn = self._conn
        if conn < 0:
            return False
        if self._link() == conn:
            return True
        self.deactivate()  # reconnected (or down): invalidations may have been lost
        self._lost()
        return False

    def lookup(self, key: str) -> Entry | object | None:
        """The entry (None: absent) if memory can answer for `key`, else MISS."""
        item = self._entries.get(key)
        if item is None or not self._usable():
            return MISS
        self.hits += 1
        return item[0]

    def begin(self, key: str) -> _Fill | None:
        """Before a read from storage whose answer may be kept (None: it may not)."""
        if not self._usable():
            return None
        cell = self._fills.get(key)
        if cell is None:
            cell = self._fills[key] = [0, 0]
        cell[1] += 1
        return _Fill(key, self._epoch, cell)

    def end(self, fill: _Fill, entry: Entry | None, *, keep: bool = True) -> None:
        """After the read: keep its answer if nothing invalidated it meanwhile."""
        cell = fill.cell
        cell[1] -= 1
        if cell[1] == 0 and self._fills.get(fill.key) is cell:
            del self._fills[fill.key]
        if not keep or fill.epoch != self._epoch or cell[0] != fill.gen or not self._usable():
            return
        size = len(fill.key) + OVERHEAD + (len(entry.value) if entry is not None else 0)
        if size > self.max_bytes // 64:
            return  # one big value would push out many small ones
        old = self._entries.pop(fill.key, None)
        if old is not None:
            self._bytes -= old[1]
        self._entries[fill.key] = (entry, size)
        self._bytes += size
        while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
            _, (_, dropped) = self._entries.popitem(last=False)  # the oldest
            self._bytes -= dropped

    def invalidate(self, key: str) -> None:
        """The key changed (or may have): forget it, and keep no read of it now in flight."""
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old[1]
        cell = self._fills.get(key)
        if cell is not None:
            cell[0] += 1

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        return self._bytes
