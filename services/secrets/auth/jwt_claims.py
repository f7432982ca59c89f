"""Claims of a verified JWT as the jwt/oidc auth method reads them: the user and groups claims,
bound claims (exact or glob), and claim mappings into token metadata.

A claim name starting with `/` is a JSON pointer into nested claims (`/groups/0`), as in Vault.
"""

from __future__ import annotations

import fnmatch
from typing import Any


class ClaimError(ValueError):
    pass


def get_claim(claims: dict[str, Any], name: str) -> Any:
    if not name.startswith("/"):
        return claims.get(name)
    value: Any = claims
    for raw in name[1:].split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(value, dict):
            value = value.get(part)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _scalar(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    return None


def check_bound_claims(kind: str, bound: dict[str, Any], claims: dict[str, Any]) -> None:
    """Every bound claim must be present and match one of its expected values."""
    for name, expected in bound.items():
        actual = get_claim(claims, name)
        if actual is None:
            raise ClaimError(f"claim {name!r} is missing")
        wanted = [_scalar(v) for v in as_list(expected)]
        have = [_scalar(v) for v in as_list(actual)]
        if kind == "glob":
            ok = any(
                h is not None and fnmatch.fnmatchcase(h, w or "") for h in have for w in wanted
            )
        else:
            ok = any(h is not None and h in wanted for h in have)
        if not ok:
            raise ClaimError(f"claim {name!r} does not match any associated bound claim values")


def mapped_metadata(mappings: dict[str, str], claims: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for claim, key in mappings.items():
        value = get_claim(claims, claim)
        if value is None:
            continue
        text = _scalar(value)
        if text is None:
            raise ClaimError(f"error converting claim {claim!r} to string")
        out[key] = text
    return out


def user_name(claims: dict[str, Any], claim: str, json_pointer: bool) -> str:
    value = get_claim(claims, claim) if json_pointer else claims.get(claim)
    if value is None:
        raise ClaimError(f"claim {claim!r} not found in token")
    if not isinstance(value, str):
        raise ClaimError(f"claim {claim!r} could not be converted to string")
    return value


def group_names(claims: dict[str, Any], claim: str) -> list[str]:
    value = get_claim(claims, claim)
    if value is None:
        raise ClaimError(f"{claim!r} claim not found in token")
    names = []
    for item in as_list(value):
        if not isinstance(item, str):
            raise ClaimError(f"value {item!r} in groups claim could not be parsed as string")
        if item:
            names.append(item)
    return names
