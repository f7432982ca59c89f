"""go-version style constraints (`>= 1.2, < 2.0`, `~> 1.4`) for the version/semver operands."""

from __future__ import annotations

import re

_VERSION = re.compile(r"^v?(\d+(?:\.\d+)*)(?:-([0-9A-Za-z.\-]+))?(?:\+[0-9A-Za-z.\-]+)?$")
_SEMVER = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.\-]+))?(?:\+[0-9A-Za-z.\-]+)?$")
_CONSTRAINT = re.compile(r"^\s*(>=|<=|!=|~>|=|>|<)?\s*(\S+)\s*$")


def parse_version(text: str, *, strict: bool = False) -> tuple[tuple[int, ...], str] | None:
    m = (_SEMVER if strict else _VERSION).match(text.strip())
    if not m:
        return None
    if strict:
        nums = tuple(int(m.group(i)) for i in (1, 2, 3))
        return nums, m.group(4) or ""
    nums = tuple(int(x) for x in m.group(1).split("."))
    return nums, m.group(2) or ""


def _cmp(a: tuple[tuple[int, ...], str], b: tuple[tuple[int, ...], str]) -> int:
    n = max(len(a[0]), len(b[0]))
    x = a[0] + (0,) * (n - len(a[0]))
    y = b[0] + (0,) * (n - len(b[0]))
    if x != y:
        return -1 if x < y else 1
    # A pre-release sorts before its release.
    if a[1] == b[1]:
        return 0
    if not a[1]:
        return 1
    if not b[1]:
        return -1
    return -1 if a[1] < b[1] else 1


def check_version(version: str, constraint: str, *, strict: bool = False) -> bool:
    have = parse_version(version, strict=strict)
    if have is None:
        return False
    for part in constraint.split(","):
        m = _CONSTRAINT.match(part)
        if not m:
            return False
        op, text = m.group(1) or "=", m.group(2)
        want = parse_version(text, strict=strict)
        if want is None:
            return False
        c = _cmp(have, want)
        if op == "~>":
            # Pessimistic: >= want and same prefix except for the last given segment.
            prefix = want[0][:-1] if len(want[0]) > 1 else want[0]
            ok = c >= 0 and have[0][: len(prefix)] == prefix
        else:
            ok = {"=": c == 0, "!=": c != 0, ">": c > 0, "<": c < 0, ">=": c >= 0, "<=": c <= 0}[op]
        if not ok:
            return False
    return True
