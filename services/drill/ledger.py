"""The write ledger: every write the cluster acknowledged, so a drill can read each one back
after the fault and count the ones that were lost."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Write:
    kind: str  # "kv" | "workspace" | "job"
    key: str
    value: Any
    acked_at: float


@dataclass
class Ledger:
    writes: dict[tuple[str, str], Write] = field(default_factory=dict)

    def ack(self, kind: str, key: str, value: Any, at: float) -> None:
        # Keys are unique per write, so a second ack of one key is a drill bug.
        if (kind, key) in self.writes:
            raise ValueError(f"{kind} {key} acknowledged twice")
        self.writes[(kind, key)] = Write(kind, key, value, at)

    def __len__(self) -> int:
        return len(self.writes)

    def __iter__(self) -> Iterator[Write]:
        return iter(list(self.writes.values()))

    def ack_times(self) -> list[float]:
        return sorted(w.acked_at for w in self.writes.values())


@dataclass
class Verification:
    checked: int = 0
    lost: list[Write] = field(default_factory=list)
    by_kind: dict[str, dict[str, int]] = field(default_factory=dict)
    # Writes that could not be read at all before the deadline (cluster not answering).
    unverified: int = 0

    def record(self, write: Write, found: bool) -> None:
        self.checked += 1
        kind = self.by_kind.setdefault(write.kind, {"acked": 0, "lost": 0})
        kind["acked"] += 1
        if not found:
            kind["lost"] += 1
            self.lost.append(write)

    def as_dict(self, sample: int = 10) -> dict[str, Any]:
        return {
            "acked_writes": self.checked,
            "lost_writes": len(self.lost),
            "by_kind": dict(sorted(self.by_kind.items())),
            "lost_examples": [f"{w.kind}:{w.key}" for w in self.lost[:sample]],
            "unverified_writes": self.unverified,
        }
