"""Pure statistics for drill reports: samples, percentiles, phase bucketing, write stalls."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

PHASES = ("before", "during", "after")


@dataclass(frozen=True, slots=True)
class Sample:
    """One request as the client saw it: start and end (seconds since the drill began), the
    operation, and the HTTP status (0 = the connection failed, no status)."""

    start: float
    end: float
    op: str
    status: int

    @property
    def latency(self) -> float:
        return self.end - self.start

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100); 0.0 for no values."""
    if not values:
        return 0.0
    xs = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(xs)))
    return xs[min(rank, len(xs)) - 1]


def phase_of(t: float, fault_start: float | None, fault_end: float | None) -> str:
    """Before the first fault, during the fault window, or after it ended. A drill with no
    fault window puts everything in `before`."""
    if fault_start is None or t < fault_start:
        return "before"
    if fault_end is None or t < fault_end:
        return "during"
    return "after"


def summarise(samples: Iterable[Sample], seconds: float | None = None) -> dict[str, Any]:
    """Requests, errors by status, p50/p99 latency in ms (and throughput if seconds given)."""
    items = list(samples)
    lat = [s.latency for s in items]
    errors = Counter(str(s.status) for s in items if not s.ok)
    out: dict[str, Any] = {
        "requests": len(items),
        "ok": len(items) - sum(errors.values()),
        "errors": dict(sorted(errors.items())),
        "p50_ms": round(percentile(lat, 50) * 1000, 2),
        "p99_ms": round(percentile(lat, 99) * 1000, 2),
    }
    if seconds:
        out["rps"] = round(len(items) / seconds, 1)
    return out


def by_phase(
    samples: Iterable[Sample], fault_start: float | None, fault_end: float | None
) -> dict[str, dict[str, Any]]:
    """Summaries per phase; a request belongs to the phase in which it started."""
    buckets: dict[str, list[Sample]] = {p: [] for p in PHASES}
    for s in samples:
        buckets[phase_of(s.start, fault_start, fault_end)].append(s)
    return {p: summarise(v) for p, v in buckets.items()}


def longest_stall(ack_times: Iterable[float], start: float, end: float) -> tuple[float, float]:
    """The longest interval in [start, end] with no acknowledged write: (length, where it
    began). The window edges count, so a load that never recovers shows its full stall."""
    points = sorted(t for t in ack_times if start <= t <= end)
    best, at, prev = 0.0, start, start
    for t in [*points, end]:
        if t - prev > best:
            best, at = t - prev, prev
        prev = t
    return best, at
