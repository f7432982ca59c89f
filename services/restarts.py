"""When to restart a crashed child, and when to give up: exponential backoff over the crashes
of one child within a sliding window (what systemd's StartLimitBurst/IntervalSec and Nomad's
restart block do). Pure logic, no clock of its own: callers pass monotonic time."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class RestartPolicy:
    base: float = 0.5  # delay before the first restart
    cap: float = 10.0  # longest delay between restarts
    window: float = 60.0  # crashes older than this are forgiven
    limit: int = 5  # this many crashes within `window` and the supervisor gives up
    crashes: deque[float] = field(default_factory=deque)

    def crashed(self, now: float) -> float | None:
        """Record a crash at `now`; the delay before restarting, or None to give up."""
        self.crashes.append(now)
        while self.crashes and now - self.crashes[0] > self.window:
            self.crashes.popleft()
        if len(self.crashes) >= self.limit:
            return None
        return min(self.cap, self.base * 2 ** (len(self.crashes) - 1))

    @property
    def recent(self) -> int:
        return len(self.crashes)
