"""The event stream's source (Nomad's event broker): what each applied log entry changed, as
events by topic, kept in a bounded in-memory ring so a reader can resume from an index. Records
are kept by reference (the tables replace records, never mutate them), so recording costs an
append per change."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

MAX_BATCHES = 4096  # applied entries kept for readers that resume from an index

TOPICS = ("Job", "Allocation", "Evaluation", "Deployment", "Node")

_TYPES = {
    ("Job", "job.deregister"): "JobDeregistered",
    ("Allocation", "plan.apply"): "PlanResult",
    ("Allocation", "alloc.transition"): "AllocationUpdateDesiredStatus",
    ("Node", "node.register"): "NodeRegistration",
    ("Node", "node.drain"): "NodeDrain",
    ("Node", "node.eligibility"): "NodeEligibility",
}
_DEFAULT = {
    "Job": "JobRegistered",
    "Allocation": "AllocationUpdated",
    "Evaluation": "EvaluationUpdated",
    "Deployment": "DeploymentStatusUpdate",
    "Node": "NodeStatusUpdate",
}


@dataclass(slots=True)
class Batch:
    index: int
    kind: str  # the log entry type
    changes: list[tuple[str, dict[str, Any]]]


def event_type(topic: str, kind: str) -> str:
    return _TYPES.get((topic, kind), _DEFAULT[topic])


class EventRing:
    def __init__(self, size: int = MAX_BATCHES) -> None:
        self.batches: deque[Batch] = deque(maxlen=size)

    def add(self, index: int, kind: str, changes: list[tuple[str, dict[str, Any]]]) -> None:
        if changes:
            self.batches.append(Batch(index, kind, changes))

    def since(self, index: int) -> list[Batch]:
        """Batches after `index`, oldest first (from the oldest kept when it is older)."""
        out: list[Batch] = []
        for b in reversed(self.batches):
            if b.index <= index:
                break
            out.append(b)
        out.reverse()
        return out

    @property
    def last_index(self) -> int:
        return self.batches[-1].index if self.batches else 0


def parse_topics(values: list[str]) -> dict[str, set[str]] | str:
    """`topic=Job:example` values -> {topic: keys}; "*" for all. An error message on bad input."""
    if not values:
        return {t: {"*"} for t in TOPICS}
    out: dict[str, set[str]] = {}
    for v in values:
        topic, _, key = v.partition(":")
        key = key or "*"
        if topic == "*":
            for t in TOPICS:
                out.setdefault(t, set()).add(key)
        elif topic in TOPICS:
            out.setdefault(topic, set()).add(key)
        else:
            return f'invalid topic "{topic}"'
    return out


def matches(topics: dict[str, set[str]], topic: str, keys: list[str]) -> bool:
    wanted = topics.get(topic)
    return bool(wanted) and ("*" in wanted or any(k in wanted for k in keys))
