"""Pure rules on names, paths, repository identifiers and tool versions."""

from __future__ import annotations

import re
import secrets
import string

from services.workspace.jsonapi import ApiError

NAME_RE = re.compile(r"^[A-Za-z0-9_-]+$")
TAG_RE = re.compile(r"^[A-Za-z0-9:_-]+$")
PROJECT_RE = re.compile(r"^[A-Za-z0-9 _-]{3,40}$")
REPO_RE = re.compile(r"^[^/\s]+/[^/\s]+$|^[^/\s]+/[^/\s]+/_git/[^/\s]+$")
VERSION_RE = re.compile(r"^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$")

# Known tool releases, newest last: "latest" and constraints resolve against this list.
RELEASES = (
    "1.0.11",
    "1.1.9",
    "1.2.9",
    "1.3.10",
    "1.4.7",
    "1.5.7",
    "1.6.6",
    "1.7.5",
    "1.8.5",
    "1.9.8",
    "1.10.5",
    "1.11.4",
    "1.12.2",
)
LATEST = RELEASES[-1]

_ALPHABET = string.ascii_letters + string.digits


def new_id(prefix: str) -> str:
    """Writer-chosen ids (`ws-…`), random enough that apply never sees a collision."""
    return f"{prefix}-" + "".join(secrets.choice(_ALPHABET) for _ in range(16))


def check_name(value: str, pointer: str, *, what: str = "name", max_len: int = 90) -> str:
    if not value:
        raise ApiError(422, f"{what} is required", pointer)
    if len(value) > max_len or not NAME_RE.match(value):
        raise ApiError(
            422,
            f"{what} {value!r} is invalid: use only letters, numbers, - and _ "
            f"(at most {max_len} characters)",
            pointer,
        )
    return value


def check_tag(value: str, pointer: str) -> str:
    if not value or len(value) > 255 or not TAG_RE.match(value):
        raise ApiError(
            422,
            f"tag name {value!r} is invalid: use letters, numbers, colons, "
            f"hyphens and underscores (1 to 255 characters)",
            pointer,
        )
    return value


def check_repo_identifier(value: str, pointer: str) -> str:
    if not REPO_RE.match(value):
        raise ApiError(
            422,
            f"vcs-repo identifier {value!r} must be :org/:repo (or :org/:project/_git/:repo)",
            pointer,
        )
    return value


def check_relative_path(value: str, pointer: str) -> str:
    parts = value.split("/")
    if value.startswith("/") or ".." in parts:
        raise ApiError(
            422, f"{value!r} must be a path relative to the repository root without ..", pointer
        )
    return value


def _key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("-")[0].split("."))


_CONSTRAINT = re.compile(r"^\s*(=|!=|>=|<=|>|<|~>)?\s*v?(\d+(?:\.\d+){0,2})\s*$")


def _matches(version: str, op: str, ref: str) -> bool:
    have, want = _key(version), _key(ref)
    padded = want + (0,) * (3 - len(want))
    if op == "~>":
        # ~> 1.2 allows >= 1.2, < 2.0; ~> 1.2.3 allows >= 1.2.3, < 1.3.0
        prefix = want[:-1] if len(want) > 1 else want
        return have >= padded and have[: len(prefix)] == prefix
    return {
        "=": have == padded,
        "!=": have != padded,
        ">": have > padded,
        ">=": have >= padded,
        "<": have < padded,
        "<=": have <= padded,
    }[op]


def resolve_tool_version(value: str, pointer: str) -> str:
    """An exact version stays as given; "latest" and constraints resolve to the newest known
    release that matches (a constraint nobody satisfies is a 422)."""
    value = value.strip()
    if value in ("", "latest"):
        return LATEST
    if VERSION_RE.match(value):
        return value
    parts = value.split(",")
    parsed = []
    for part in parts:
        m = _CONSTRAINT.match(part)
        if m is None:
            raise ApiError(
                422, f"tool-version {value!r} is neither a version nor a constraint", pointer
            )
        parsed.append((m.group(1) or "=", m.group(2)))
    for release in reversed(RELEASES):
        if all(_matches(release, op, ref) for op, ref in parsed):
            return release
    raise ApiError(422, f"no known release satisfies tool-version {value!r}", pointer)
