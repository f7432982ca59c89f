"""Vault's weak typing for the KV values read from a raw body or query: `version`, `versions`,
`cas`, and the `data` / `options` objects. Anything unreadable is a 400, never a 500."""

from __future__ import annotations

from typing import Any

from services.secrets.errors import bad_request
from shared import jsonbody

MAX_VERSIONS_LIMIT = 2**32 - 1  # Vault keeps max_versions in a uint32
MAX_DURATION = (2**63 - 1) // 10**9  # Go's time.Duration limit, in seconds


def weak_int(name: str, value: Any) -> int:
    """12, 12.0, "12", "" (0), true (1); a one-element list from a repeated query parameter."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if value is None:
        return 0
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if text == "":
            return 0
        try:
            return int(text)
        except ValueError:
            pass
    raise bad_request(f"{name} must be an integer, got {value!r}")


def version_param(value: Any) -> int:
    """A version to read: 0 (or absent) means the current one."""
    number = weak_int("version", value)
    if number < 0:
        raise bad_request(f"invalid version {number}: versions start at 1")
    return number


def version_list(values: list[str]) -> list[int]:
    """The `versions` of delete/undelete/destroy, already split by the CommaList field."""
    out = []
    for v in values:
        number = weak_int("versions", v)
        if number < 0:
            raise bad_request(f"invalid version {number}: versions start at 1")
        out.append(number)
    if not out:
        raise bad_request("no version number provided")
    return out


def json_object(name: str, value: Any, *, required: bool) -> dict[str, Any] | None:
    """An object, or a string holding one (Vault's TypeMap)."""
    if value is None:
        if required:
            raise bad_request(f"no {name} provided")
        return None
    if isinstance(value, str):
        try:
            value = jsonbody.loads(value) if value.strip() else {}
        except ValueError:
            raise bad_request(f"{name} must be a JSON object") from None
    if not isinstance(value, dict):
        raise bad_request(f"{name} must be a JSON object")
    return value


def cas_option(body: dict[str, Any]) -> int | None:
    """`options.cas` of a data write: None when absent."""
    options = json_object("options", body.get("options"), required=False)
    if not options or options.get("cas") is None:
        return None
    try:
        return weak_int("cas", options["cas"])
    except Exception:
        raise bad_request("error parsing check-and-set parameter") from None


def check_settings(
    max_versions: int | None, delete_after: int | None, *, negative_delete_after: bool
) -> None:
    """Bounds of max_versions and delete_version_after, before they reach a stored record."""
    if max_versions is not None and not 0 <= max_versions <= MAX_VERSIONS_LIMIT:
        raise bad_request(f"max_versions must be between 0 and {MAX_VERSIONS_LIMIT}")
    if delete_after is not None:
        if delete_after < 0 and not negative_delete_after:
            raise bad_request("delete_version_after cannot be negative")
        if abs(delete_after) > MAX_DURATION:
            raise bad_request("delete_version_after is too long")
