"""Durations as Vault accepts them: integers are seconds; strings may be "90", "1h30m", "2.5s",
"1d" (days are accepted as a convenience; hours are the largest unit Go's parser knows)."""

from __future__ import annotations

import re
from functools import lru_cache

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600, "d": 86400}
# Go's time.Duration is int64 nanoseconds: the longest duration any anchor holds.
MAX_SECONDS = (2**63 - 1) // 10**9
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h|d)")
_INTEGER = re.compile(r"-?\d+")


def parse_duration(value: object) -> int:
    """Seconds in `value`; raises ValueError naming what could not be read."""
    if isinstance(value, bool):
        raise ValueError(f"cannot use a boolean ({value}) as a duration")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    if not isinstance(value, str):
        raise ValueError(f"cannot use {type(value).__name__} as a duration")
    return _parse_text(value) if len(value) <= 32 else _parse(value)


def _parse(value: str) -> int:
    text = value.strip()
    if text == "":
        return 0
    if _INTEGER.fullmatch(text):
        return int(text)
    sign = 1
    if text[0] in "+-":
        sign = -1 if text[0] == "-" else 1
        text = text[1:]
    pos = 0
    total = 0.0
    for m in _PART.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(text) or pos == 0:
        raise ValueError(f"invalid duration {value!r}")
    if total > MAX_SECONDS:  # also inf, from a unit with hundreds of digits
        raise ValueError(f"duration {value!r} is out of range")
    return sign * int(total)


# Clients send the same few strings ("1h", "768h") again and again; errors are not cached.
_parse_text = lru_cache(maxsize=1024)(_parse)


def format_duration(seconds: int) -> str:
    """Go's time.Duration String() form, e.g. 3600 -> "1h0m0s", 0 -> "0s"."""
    if seconds == 0:
        return "0s"
    sign = "-" if seconds < 0 else ""
    s = abs(seconds)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    if h:
        return f"{sign}{h}h{m}m{sec}s"
    if m:
        return f"{sign}{m}m{sec}s"
    return f"{sign}{sec}s"
