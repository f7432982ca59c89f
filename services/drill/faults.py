"""Fault events and the rule that says which client errors a fault explains: a 503/504 (or a
dropped connection to a killed gateway) whose request was in flight while a replica died or
was stopped."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from services.drill.stats import Sample

# Statuses a client may see when the replica serving its request dies.
TRANSIENT = frozenset({503, 504})


@dataclass(frozen=True, slots=True)
class FaultEvent:
    at: float  # seconds since the drill began
    action: str  # "kill", "stop", "cont", "restart", "latency", "partition", ...
    target: str  # "secrets#1", "nats-n2", "proxy", ...
    until: float | None = None  # end of a fault with a duration (SIGSTOP, partition)

    @property
    def service(self) -> str:
        return self.target.split("#", 1)[0]

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "at": round(self.at, 2),
            "action": self.action,
            "target": self.target,
        }
        if self.until is not None:
            out["until"] = round(self.until, 2)
        return out


def _overlaps(s: Sample, e: FaultEvent, grace: float) -> bool:
    end = e.until if e.until is not None else e.at
    return s.start - grace <= end and e.at <= s.end + grace


def explained(s: Sample, events: Iterable[FaultEvent], grace: float = 0.5) -> bool:
    """True if the error is one a fault may cause: 503/504 while any fault was active during
    the request, or a failed connection (status 0) while a gateway replica was down."""
    # A restart counts until the replica is ready again (its `until`): it may have joined its
    # queue group a moment before it can serve.
    disruptive = [e for e in events if e.action != "cont"]
    if s.status in TRANSIENT:
        return any(_overlaps(s, e, grace) for e in disruptive)
    if s.status == 0:
        return any(e.service == "gateway" and _overlaps(s, e, grace) for e in disruptive)
    return False


def unexplained_errors(
    samples: Iterable[Sample], events: list[FaultEvent], grace: float = 0.5
) -> list[Sample]:
    return [s for s in samples if not s.ok and not explained(s, events, grace)]
