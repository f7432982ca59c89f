"""The expiry leader's in-memory copy of the schedule (`sys/expire/at/<minute>/<second>-<h>`):
which names are due by a given time, in due order, without listing storage. It holds names only;
storage stays the truth and the leader rebuilds this from it whenever it takes over."""

from __future__ import annotations

import heapq


def due_second(name: str) -> int:
    """The second a schedule name falls due: `<minute>/<second>-<h>` → second. A name that does
    not parse is due at once, so the expiry pass handles it (from the entry's own `due`) and
    removes it, rather than it stalling everything behind it."""
    try:
        return int(name.rpartition("/")[2].split("-", 1)[0])
    except ValueError:
        return 0


class ExpiryIndex:
    """Names grouped by due second, with a heap of the seconds: finding what is due costs
    O(due log n), whatever the number of scheduled entries."""

    def __init__(self) -> None:
        self._by_second: dict[int, set[str]] = {}
        self._heap: list[int] = []
        self._in_heap: set[int] = set()  # so a second is pushed once however often it is added

    def __len__(self) -> int:
        return sum(len(names) for names in self._by_second.values())

    def __contains__(self, name: str) -> bool:
        return name in self._by_second.get(due_second(name), ())

    def add(self, name: str) -> None:
        second = due_second(name)
        self._by_second.setdefault(second, set()).add(name)
        if second not in self._in_heap:
            self._in_heap.add(second)
            heapq.heappush(self._heap, second)

    def discard(self, name: str) -> None:
        second = due_second(name)
        names = self._by_second.get(second)
        if names is not None:
            names.discard(name)
            if not names:
                # Its heap entry goes when that second comes due.
                del self._by_second[second]

    def due(self, now: float) -> list[str]:
        """Names due at `now` (second ≤ now), oldest first. They stay in the index until
        discarded, so an entry whose expiry failed is offered again next time."""
        seconds: list[int] = []
        while self._heap and self._heap[0] <= now:
            second = heapq.heappop(self._heap)
            self._in_heap.discard(second)
            if second in self._by_second:
                seconds.append(second)
        for second in seconds:
            self._in_heap.add(second)
            heapq.heappush(self._heap, second)
        return [name for second in seconds for name in sorted(self._by_second[second])]

    def clear(self) -> None:
        self._by_second.clear()
        self._heap.clear()
        self._in_heap.clear()
