"""Go-style durations: "1h30m", "250ms" <-> integer nanoseconds (Nomad's JSON unit)."""

from __future__ import annotations

import re

_UNITS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "μs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")

SECOND = 1_000_000_000


class DurationError(ValueError):
    pass


def parse_duration(text: str) -> int:
    """Parse like Go's time.ParseDuration; returns nanoseconds."""
    s = text.strip()
    if not s:
        raise DurationError(f'time: invalid duration "{text}"')
    sign = 1
    if s[0] in "+-":
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    if s == "0":
        return 0
    pos, total = 0, 0.0
    while pos < len(s):
        m = _PART.match(s, pos)
        if not m:
            if re.fullmatch(r"\d+(\.\d*)?", s[pos:]):
                raise DurationError(f'time: missing unit in duration "{text}"')
            raise DurationError(f'time: invalid duration "{text}"')
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    return sign * round(total)


def to_nanos(value: object) -> int:
    """HCL durations: strings through ParseDuration, numbers taken as nanoseconds."""
    if isinstance(value, bool):
        raise DurationError(f"unsupported duration value {value!r}")
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str):
        return parse_duration(value)
    raise DurationError(f"unsupported duration value {value!r}")


def format_duration(ns: int) -> str:
    """Go's Duration.String() for whole-unit values (used in messages only)."""
    if ns == 0:
        return "0s"
    out, rest = ("-" if ns < 0 else ""), abs(ns)
    if rest < SECOND:
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if rest >= size:
                return f"{out}{rest / size:g}{unit}"
    h, rest = divmod(rest, 3600 * SECOND)
    m, rest = divmod(rest, 60 * SECOND)
    secs = rest / SECOND
    if h:
        out += f"{h}h"
    if h or m:
        out += f"{m}m"
    return out + f"{secs:g}s"
