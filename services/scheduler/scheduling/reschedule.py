"""ReschedulePolicy: may a failed allocation be replaced, and after what delay."""

from __future__ import annotations

from typing import Any


def next_delay(policy: dict[str, Any], tracker: dict[str, Any] | None) -> int:
    """Delay before the next attempt (ns): constant, exponential or fibonacci, capped."""
    base = int(policy.get("Delay") or 0)
    fn = policy.get("DelayFunction") or "constant"
    events = (tracker or {}).get("Events") or []
    max_delay = int(policy.get("MaxDelay") or 0)
    if not events or fn == "constant":
        delay = base
    elif fn == "exponential":
        delay = int(events[-1].get("Delay") or base) * 2
    else:  # fibonacci
        prev = [int(e.get("Delay") or 0) for e in events[-2:]]
        delay = sum(prev) if len(prev) == 2 else base
    if max_delay and delay > max_delay:
        delay = max_delay
    return delay


def may_reschedule(policy: dict[str, Any] | None, tracker: dict[str, Any] | None, now: int) -> bool:
    if not policy:
        return False
    if policy.get("Unlimited"):
        return True
    attempts = int(policy.get("Attempts") or 0)
    if attempts <= 0:
        return False
    interval = int(policy.get("Interval") or 0)
    events = (tracker or {}).get("Events") or []
    recent = [e for e in events if not interval or now - int(e["RescheduleTime"]) < interval]
    return len(recent) < attempts


def tracker_with(alloc: dict[str, Any], now: int, delay: int) -> dict[str, Any]:
    events = list((alloc.get("RescheduleTracker") or {}).get("Events") or [])
    events.append(
        {
            "PrevAllocID": alloc["ID"],
            "PrevNodeID": alloc["NodeID"],
            "RescheduleTime": now,
            "Delay": delay,
        }
    )
    return {"Events": events}
