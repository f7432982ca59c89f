"""The wait rule of long polls (Nomad's blocking queries), shared by the service that waits and
the gateway whose deadline must outlast the wait: default 5 minutes, capped at 10, plus a random
stagger of up to wait/16 so that many waiters started together do not all return together."""

from __future__ import annotations

import random

DEFAULT_WAIT = 300.0  # Nomad's DefaultBlockingRPCQueryTime
MAX_WAIT = 600.0  # the cap Nomad documents (10 minutes)
JITTER_FRACTION = 16  # Nomad's JitterFraction


def clamp_wait(seconds: float) -> float:
    """As Nomad's TimeToBlock: zero or less means the default, more than the cap the cap."""
    return DEFAULT_WAIT if seconds <= 0 else min(seconds, MAX_WAIT)


def jittered(wait: float) -> float:
    return wait + random.random() * wait / JITTER_FRACTION


def latest_answer(wait: float) -> float:
    """The longest a long poll of `wait` seconds may take before it is answered."""
    return wait + wait / JITTER_FRACTION
