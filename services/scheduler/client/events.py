"""Task events and task state records in Nomad's shape."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

from services.scheduler.durations import format_duration


def rfc3339(ts: float | None = None) -> str:
    t = dt.datetime.fromtimestamp(time.time() if ts is None else ts, dt.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


ZERO_TIME = "0001-01-01T00:00:00Z"


def event(kind: str, message: str = "", **details: Any) -> dict[str, Any]:
    ev: dict[str, Any] = {
        "Type": kind,
        "Time": time.time_ns(),
        "Message": "",
        "DisplayMessage": message,
        "Details": {k: str(v) for k, v in details.items()},
        "FailsTask": False,
        "RestartReason": "",
        "SetupError": "",
        "DriverError": "",
        "ExitCode": 0,
        "Signal": 0,
        "KillTimeout": 0,
        "KillError": "",
        "KillReason": "",
        "StartDelay": 0,
        "DownloadError": "",
        "ValidationError": "",
        "DiskLimit": 0,
        "FailedSibling": "",
        "VaultError": "",
        "TaskSignalReason": "",
        "TaskSignal": "",
        "DriverMessage": "",
        "GenericSource": "",
    }
    for k, v in details.items():
        key = {
            "exit_code": "ExitCode",
            "signal": "Signal",
            "driver_error": "DriverError",
            "fails_task": "FailsTask",
            "restart_reason": "RestartReason",
            "start_delay": "StartDelay",
            "kill_timeout": "KillTimeout",
            "setup_error": "SetupError",
        }.get(k)
        if key:
            ev[key] = v
    return ev


RECEIVED = ("Received", "Task received by client")
SETUP = ("Task Setup", "Building Task Directory")
STARTED = ("Started", "Task started by client")


def terminated(exit_code: int, sig: int) -> dict[str, Any]:
    return event(
        "Terminated",
        f"Exit Code: {exit_code}" + (f", Signal: {sig}" if sig else ""),
        exit_code=exit_code,
        signal=sig,
    )


def restarting(delay_ns: int, reason: str) -> dict[str, Any]:
    return event(
        "Restarting",
        f"Task restarting in {format_duration(delay_ns)}",
        start_delay=delay_ns,
        restart_reason=reason,
    )


def not_restarting(attempts: int, interval_ns: int, mode: str) -> dict[str, Any]:
    reason = (
        f"Exceeded allowed attempts {attempts} in interval "
        f'{format_duration(interval_ns)} and mode is "{mode}"'
    )
    return event("Not Restarting", reason, fails_task=True, restart_reason=reason)


def task_state() -> dict[str, Any]:
    return {
        "State": "pending",
        "Failed": False,
        "Restarts": 0,
        "LastRestart": ZERO_TIME,
        "StartedAt": ZERO_TIME,
        "FinishedAt": ZERO_TIME,
        "Events": [],
    }
