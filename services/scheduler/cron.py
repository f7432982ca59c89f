"""Cron expressions as Nomad's periodic jobs take them (gorhill/cronexpr): five fields (minute
hour day-of-month month day-of-week), six (plus year), seven (seconds first, plus year), the
@yearly/@monthly/@weekly/@daily/@hourly shorthands, names (JAN, MON), ranges, steps, lists, and
the next launch in a time zone. Pure."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
DAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]
SHORTHANDS = {
    "@yearly": "0 0 0 1 1 * *",
    "@annually": "0 0 0 1 1 * *",
    "@monthly": "0 0 0 1 * * *",
    "@weekly": "0 0 0 * * 0 *",
    "@daily": "0 0 0 * * * *",
    "@midnight": "0 0 0 * * * *",
    "@hourly": "0 0 * * * * *",
}
SEARCH_YEARS = 8  # beyond this a spec such as Feb 30 never fires


class CronError(ValueError):
    pass


@dataclass(frozen=True)
class Cron:
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    dom: frozenset[int]
    months: frozenset[int]
    dow: frozenset[int]
    years: frozenset[int] | None
    dom_any: bool
    dow_any: bool

    def _day_ok(self, d: dt.date) -> bool:
        if d.month not in self.months or (self.years is not None and d.year not in self.years):
            return False
        dom = d.day in self.dom
        dow = (d.isoweekday() % 7) in self.dow
        if self.dom_any or self.dow_any:
            return dom and dow
        return dom or dow  # both restricted: either matches, as in Vixie cron

    def next_after(self, after: dt.datetime) -> dt.datetime | None:
        """The first time strictly after `after` (an aware datetime), in its zone."""
        tz = after.tzinfo
        start = after.replace(microsecond=0) + dt.timedelta(seconds=1)
        day = start.date()
        end = day + dt.timedelta(days=366 * SEARCH_YEARS)
        while day <= end:
            if self._day_ok(day):
                for h in sorted(self.hours):
                    for m in sorted(self.minutes):
                        for s in sorted(self.seconds):
                            naive = dt.datetime(day.year, day.month, day.day, h, m, s)
                            when = naive.replace(tzinfo=tz)
                            # A wall time the DST gap skips does not exist: skip it too.
                            back = when.astimezone(dt.UTC).astimezone(tz)
                            if back.replace(tzinfo=None) != naive:
                                continue
                            if when >= start:
                                return when
            day += dt.timedelta(days=1)
        return None


def _value(tok: str, lo: int, names: list[str] | None) -> int:
    up = tok.upper()
    if names and up[:3] in names and not up.isdigit():
        return names.index(up[:3]) + (lo if names is MONTHS else 0)
    if not tok.isdigit():
        raise CronError(f"invalid value {tok!r}")
    return int(tok)


def _field(text: str, lo: int, hi: int, names: list[str] | None = None) -> frozenset[int]:
    out: set[int] = set()
    for part in text.split(","):
        step = 1
        if "/" in part:
            part, step_s = part.split("/", 1)
            if not step_s.isdigit() or int(step_s) == 0:
                raise CronError(f"invalid step in {text!r}")
            step = int(step_s)
        if part in ("*", "?"):
            a, b = lo, hi
        elif "-" in part:
            x, y = part.split("-", 1)
            a, b = _value(x, lo, names), _value(y, lo, names)
        else:
            a = _value(part, lo, names)
            b = hi if step > 1 else a
        if not (lo <= a <= hi and lo <= b <= hi) or a > b:
            raise CronError(f"value out of range in {text!r} ({lo}-{hi})")
        # Day of week 7 is Sunday, like 0.
        out.update(v % 7 if names is DAYS else v for v in range(a, b + 1, step))
    return frozenset(out)


def parse(spec: str) -> Cron:
    text = SHORTHANDS.get(spec.strip().lower(), spec.strip())
    fields = text.split()
    if len(fields) == 5:
        fields = ["0", *fields, "*"]
    elif len(fields) == 6:
        fields = ["0", *fields]
    elif len(fields) != 7:
        raise CronError(f"invalid cron spec {spec!r}: expected 5 to 7 fields")
    sec, mi, hr, dom, mon, dow, year = fields
    return Cron(
        seconds=_field(sec, 0, 59),
        minutes=_field(mi, 0, 59),
        hours=_field(hr, 0, 23),
        dom=_field(dom, 1, 31),
        months=_field(mon, 1, 12, MONTHS),
        dow=_field(dow, 0, 7, DAYS),
        years=None if year in ("*", "?") else _field(year, 1970, 2099),
        dom_any=dom in ("*", "?"),
        dow_any=dow in ("*", "?"),
    )


def zone(name: str) -> dt.tzinfo:
    if not name or name == "UTC":
        return dt.UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise CronError(f"Periodic time zone {name!r} is invalid: {exc}") from None


def next_launch(spec: str, tz_name: str, after_ns: int) -> int | None:
    """Unix ns of the next launch after `after_ns`, or None if it never fires again."""
    tz = zone(tz_name)
    after = dt.datetime.fromtimestamp(after_ns / 1e9, dt.UTC).astimezone(tz)
    got = parse(spec).next_after(after)
    return int(got.timestamp()) * 1_000_000_000 if got is not None else None
