"""How long the gateway waits for a service's answer: the fixed request timeout, except for a
blocking query, whose answer is due when its own `wait` runs out (up to 10 minutes and a jitter
of wait/16, as Nomad does), so the gateway's deadline follows the requested wait."""

from __future__ import annotations

from collections.abc import Mapping

from services.scheduler.durations import DurationError, parse_duration
from shared import longpoll

# Room after the latest moment the service may answer (consistent read, encoding, the bus).
GRACE = 30.0


def blocking_wait(query: Mapping[str, str]) -> float | None:
    """The wait of a blocking query (`index` > 0) in seconds, as the scheduler will apply it;
    None when the request is not a blocking query or its parameters are invalid (the service
    answers those with a 400 at once)."""
    index = query.get("index", "")
    if not index.isdigit() or int(index) == 0:
        return None
    raw = query.get("wait")
    if raw is None:
        return longpoll.DEFAULT_WAIT
    try:
        return longpoll.clamp_wait(parse_duration(raw) / 1e9)
    except DurationError:
        return None


def request_deadline(query: Mapping[str, str], default: float, blocking: bool) -> float:
    """Seconds to wait for the service's answer to this request."""
    wait = blocking_wait(query) if blocking else None
    if wait is None:
        return default
    return max(default, longpoll.latest_answer(wait) + GRACE)
