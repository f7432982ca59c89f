"""Cron expressions of periodic jobs (services/scheduler/cron.py)."""

from __future__ import annotations

import datetime as dt

import pytest

from services.scheduler import cron


def at(spec: str, after: str, tz: str = "UTC") -> str:
    start = dt.datetime.fromisoformat(after).replace(tzinfo=dt.UTC)
    got = cron.next_launch(spec, tz, int(start.timestamp()) * 1_000_000_000)
    assert got is not None
    return dt.datetime.fromtimestamp(got / 1e9, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")


def test_steps_ranges_lists_and_names() -> None:
    assert at("*/15 * * * *", "2026-03-01T10:07:00") == "2026-03-01T10:15:00"
    assert at("0 9 * * MON-FRI", "2026-11-27T10:00:00") == "2026-11-30T09:00:00"  # Fri -> Mon
    assert at("30 6 1,15 * *", "2026-01-02T00:00:00") == "2026-01-15T06:30:00"
    assert at("0 0 1 JAN *", "2026-06-01T00:00:00") == "2027-01-01T00:00:00"
    assert at("@hourly", "2026-06-01T10:00:00") == "2026-06-01T11:00:00"
    assert at("0 0 * * 7", "2026-11-25T00:00:00") == "2026-11-29T00:00:00"  # 7 is Sunday


def test_strictly_after_and_seconds_field() -> None:
    assert at("0 10 * * *", "2026-06-01T10:00:00") == "2026-06-02T10:00:00"
    assert at("30 * * * * * *", "2026-06-01T10:00:00") == "2026-06-01T10:00:30"


def test_time_zone_and_dst_gap() -> None:
    # Midnight in Paris is 23:00 UTC in winter.
    assert at("0 0 * * *", "2026-01-10T12:00:00", "Europe/Paris") == "2026-01-10T23:00:00"
    # 02:30 does not exist on the spring-forward day in New York: that day is skipped.
    assert at("30 2 * * *", "2026-03-08T00:00:00", "America/New_York") == "2026-03-09T06:30:00"


def test_dom_or_dow_when_both_restricted() -> None:
    # The 13th or a Friday, whichever comes first (Vixie cron's rule).
    assert at("0 0 13 * FRI", "2026-11-01T00:00:00") == "2026-11-06T00:00:00"


@pytest.mark.parametrize(
    "spec", ["", "* * *", "61 * * * *", "*/0 * * * *", "5-1 * * * *", "x * * * *"]
)
def test_invalid_specs(spec: str) -> None:
    with pytest.raises(cron.CronError):
        cron.parse(spec)


def test_invalid_zone_and_never() -> None:
    with pytest.raises(cron.CronError):
        cron.zone("Mars/Olympus")
    assert cron.next_launch("0 0 30 2 *", "UTC", 0) is None  # Feb 30 never comes


def test_admission_checks_the_periodic_block() -> None:
    from services.scheduler.admit import ValidationError, admit

    def job(**periodic: object) -> dict:
        return {
            "ID": "p",
            "Type": periodic.pop("Type", "batch"),
            "Datacenters": ["dc1"],
            "Periodic": {"Enabled": True, **periodic},
            "TaskGroups": [{"Name": "g", "Tasks": [{"Name": "t", "Driver": "mock"}]}],
        }

    assert admit(job(Spec="*/5 * * * *", TimeZone="Europe/Paris"))["Periodic"]["Spec"]
    for bad, text in [
        (job(Spec="not a spec"), "Invalid periodic job"),
        (job(Spec="* * * * *", TimeZone="Mars/Base"), "time zone"),
        (job(Spec="* * * * *", Type="service"), '"batch" or "sysbatch"'),
        (job(), "Must specify a spec"),
    ]:
        with pytest.raises(ValidationError, match=text):
            admit(bad)
