"""Query strings and pagination. Clients send brackets raw (`page[size]=5`, terrasnek) or
encoded (`page%5Bsize%5D=5`, go-tfe): keys are percent-decoded before anything looks at them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote, unquote_plus

from services.workspace.jsonapi import ApiError

T = TypeVar("T")

DEFAULT_PAGE_SIZE = 20
MAX_PAGE_SIZE = 100


def parse_query(raw: str) -> dict[str, str]:
    """Last value wins for a repeated key, as Rails does for scalar parameters."""
    out: dict[str, str] = {}
    for part in raw.split("&"):
        if not part:
            continue
        key, _, value = part.partition("=")
        out[unquote_plus(key)] = unquote_plus(value)
    return out


def csv(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def include_param(query: dict[str, str], valid: Sequence[str]) -> list[str]:
    """The `include` list, each one of `valid` (a 400 naming them otherwise)."""
    inc = csv(query.get("include"))
    for i in inc:
        if i not in valid:
            raise ApiError(
                400,
                f"invalid include parameter {i!r}; valid values: {', '.join(valid)}",
                title="invalid include",
            )
    return inc


def bool_param(query: dict[str, str], key: str) -> bool | None:
    if key not in query:
        return None
    v = query[key].lower()
    if v in ("true", "1"):
        return True
    if v in ("false", "0"):
        return False
    raise ApiError(422, f"{key} must be true or false", title="invalid query parameter")


@dataclass(frozen=True, slots=True)
class Page:
    number: int
    size: int

    @classmethod
    def from_query(cls, query: dict[str, str]) -> Page:
        return cls(
            _int(query, "page[number]", 1, 1, None),
            _int(query, "page[size]", DEFAULT_PAGE_SIZE, 1, MAX_PAGE_SIZE),
        )

    def slice(self, items: Sequence[T]) -> list[T]:
        start = (self.number - 1) * self.size
        return list(items[start : start + self.size])

    def meta(self, total: int) -> dict[str, Any]:
        pages = max(1, math.ceil(total / self.size))
        return {
            "current-page": self.number,
            "page-size": self.size,
            "prev-page": self.number - 1 if self.number > 1 else None,
            "next-page": self.number + 1 if self.number < pages else None,
            "total-pages": pages,
            "total-count": total,
        }

    def links(self, path: str, query: dict[str, str], total: int) -> dict[str, str | None]:
        """self/first/prev/next/last, keeping the request's other parameters."""
        pages = max(1, math.ceil(total / self.size))
        rest = "&".join(
            f"{quote(k, safe='')}={quote(v, safe=',')}"
            for k, v in query.items()
            if k not in ("page[number]", "page[size]")
        )

        def link(n: int) -> str:
            q = f"page%5Bnumber%5D={n}&page%5Bsize%5D={self.size}"
            return f"{path}?{q}&{rest}" if rest else f"{path}?{q}"

        return {
            "self": link(self.number),
            "first": link(1),
            "prev": link(self.number - 1) if self.number > 1 else None,
            "next": link(self.number + 1) if self.number < pages else None,
            "last": link(pages),
        }


def _int(query: dict[str, str], key: str, default: int, lo: int, hi: int | None) -> int:
    if key not in query or query[key] == "":
        return default
    try:
        v = int(query[key])
    except ValueError:
        raise ApiError(422, f"{key} must be an integer", title="invalid query parameter") from None
    if v < lo or (hi is not None and v > hi):
        bound = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
        raise ApiError(422, f"{key} must be {bound}", title="invalid query parameter")
    return v
