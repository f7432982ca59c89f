"""A step of a replayed request sequence, as data: the same step runs against both servers.

Strings in paths, bodies and headers may name values an earlier step saved (`{tok}`), so a
sequence can use a token, accessor or serial number that each server minted for itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# Where a step's saved value lives in the response body: keys and list indexes from the top.
Pointer = tuple[str | int, ...]


@dataclass(frozen=True)
class Raw:
    """A body sent as these exact bytes (malformed JSON and the like)."""

    text: str


@dataclass(frozen=True)
class Step:
    id: str
    method: str
    path: str
    body: dict[str, Any] | Raw | None = None
    # "root", None for no token, or "{name}" of a saved token.
    token: str | None = "root"
    headers: dict[str, str] = field(default_factory=dict)
    save: dict[str, Pointer] = field(default_factory=dict)
    # Compare the keys of the object at this pointer instead of the envelope's `data`
    # (a map keyed by mount or namespace names is compared through one entry).
    pick: Pointer | None = None
    # Set-up steps must succeed on both servers but are not compared (ids, timing).
    compare: bool = True
    # After the step: a condition both servers must reach before the next step (e.g. an
    # asynchronous namespace deletion), checked by polling this step's request.
    until: Callable[[int, Any], bool] | None = None


def S(id: str, method: str, path: str, body: Any = None, **kw: Any) -> Step:
    return Step(id, method, path, body, **kw)


def setup(id: str, method: str, path: str, body: Any = None, **kw: Any) -> Step:
    return Step(id, method, path, body, compare=False, **kw)
