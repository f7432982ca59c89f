"""Pure rules of Nomad Variables: path and item validation, the JSON shapes, and which lock
operation a write may do at a given time. Apply (apply.py) and the API use the same rules."""

from __future__ import annotations

import re
from typing import Any

from services.scheduler.durations import DurationError, format_duration, parse_duration

PATH_RE = re.compile(r"^[a-zA-Z0-9\-_~/]{1,128}$")
MAX_ITEMS_BYTES = 64 * 1024  # Nomad: "variables are limited to 64KiB in total size"
DEFAULT_TTL = 15 * 10**9
DEFAULT_LOCK_DELAY = 15 * 10**9
MIN_TTL, MAX_TTL = 10 * 10**9, 24 * 3600 * 10**9  # Nomad's bounds for a lock TTL
RESERVED = (
    '"nomad" is a reserved top-level directory path, but you may write variables to '
    '"nomad/jobs", "nomad/job-templates", or below'
)
LOCK_OPS = ("lock-acquire", "lock-renew", "lock-release")


class VariableError(ValueError):
    """Bad input: answered 400 with this message."""


def vkey(namespace: str, path: str) -> str:
    return f"{namespace}\x00{path}"


def check_path(path: str) -> None:
    if not path:
        raise VariableError("missing variable path")
    if not PATH_RE.fullmatch(path):
        raise VariableError(f'invalid path "{path}"')
    parts = path.split("/")
    if parts[0] == "nomad" and (len(parts) == 1 or parts[1] not in ("jobs", "job-templates")):
        raise VariableError(RESERVED)


def check_items(items: Any, *, required: bool) -> dict[str, str]:
    if items is None or items == {}:
        if required:
            raise VariableError("variable missing required Items object")
        return {}
    if not isinstance(items, dict):
        raise VariableError("Items must be an object of string keys and string values")
    for k, v in items.items():
        if not k:
            raise VariableError("variable item keys must not be empty")
        if not isinstance(v, str):
            raise VariableError(f'variable item "{k}" must be a string')
    size = sum(len(k.encode()) + len(v.encode()) for k, v in items.items())
    if size > MAX_ITEMS_BYTES:
        raise VariableError("variables are limited to 64KiB in total size")
    return dict(items)


def parse_lock(raw: Any) -> tuple[int, int, str]:
    """(ttl ns, lock delay ns, lock ID) from a body's `Lock` object (durations as Go strings,
    or integers of nanoseconds)."""
    if raw is None:
        return DEFAULT_TTL, DEFAULT_LOCK_DELAY, ""
    if not isinstance(raw, dict):
        raise VariableError("Lock must be an object")

    def dur(name: str, default: int) -> int:
        v = raw.get(name)
        if v in (None, "", 0):
            return default
        if isinstance(v, bool) or not isinstance(v, (str, int)):
            raise VariableError(f"Lock.{name} must be a duration")
        if isinstance(v, int):
            n = v
        else:
            try:
                n = parse_duration(v)
            except DurationError:
                raise VariableError(f"invalid Lock.{name}: {v!r}") from None
        if n < 0:
            raise VariableError(f"Lock.{name} must not be negative")
        return n

    ttl = dur("TTL", DEFAULT_TTL)
    if not MIN_TTL <= ttl <= MAX_TTL:
        raise VariableError("Lock.TTL must be between 10s and 24h")
    lock_id = raw.get("ID") or ""
    if not isinstance(lock_id, str):
        raise VariableError("Lock.ID must be a string")
    return ttl, dur("LockDelay", DEFAULT_LOCK_DELAY), lock_id


def lock_held(rec: dict[str, Any] | None, now: int) -> bool:
    lock = (rec or {}).get("_Lock")
    return bool(lock) and now < lock["Expires"]


def lock_delayed(rec: dict[str, Any] | None, now: int) -> bool:
    """A lock that lapsed without release keeps others out for its lock delay."""
    lock = (rec or {}).get("_Lock")
    return bool(lock) and lock["Expires"] <= now < lock["Expires"] + lock["LockDelay"]


def metadata(rec: dict[str, Any], now: int, *, with_lock_id: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "Namespace": rec["Namespace"],
        "Path": rec["Path"],
        "CreateIndex": rec["CreateIndex"],
        "ModifyIndex": rec["ModifyIndex"],
        "CreateTime": rec["CreateTime"],
        "ModifyTime": rec["ModifyTime"],
    }
    lock = rec.get("_Lock")
    if lock and now < lock["Expires"]:
        out["Lock"] = {
            "TTL": format_duration(lock["TTL"]),
            "LockDelay": format_duration(lock["LockDelay"]),
            # The lock ID is the holder's proof: only the acquirer ever sees it.
            "ID": lock["ID"] if with_lock_id else "",
        }
    return out
