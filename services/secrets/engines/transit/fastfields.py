"""Transit's request fields without the generic weak-typing pass, when nothing needs it.

The generic decoder (framework/fields.py) passes a value that already has its field's exact type
(a string for a `str` field, an in-range integer for an `int`, a boolean for a `bool`) through
unchanged, then converts the whole. A body made only of such values therefore builds the same
struct directly, at a third of the cost. Anything else (a weakly typed value, a null, an unknown
parameter, a missing required field, an annotated or container field) goes to the generic decoder,
which stays the one place for coercions, warnings and error messages.
"""

from __future__ import annotations

import typing
from functools import cache
from typing import Any

import msgspec

_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1  # Vault's TypeInt is a Go int
_EXACT: dict[Any, type] = {str: str, str | None: str, int: int, bool: bool}


@cache
def exact_types(struct: type[msgspec.Struct]) -> dict[str, type]:
    """Each plain field's name and the one runtime type passed through as is."""
    hints = typing.get_type_hints(struct, include_extras=True)
    out: dict[str, type] = {}
    for f in msgspec.structs.fields(struct):
        kind = _EXACT.get(hints[f.name])
        if kind is not None and f.name == f.encode_name:
            out[f.name] = kind
    return out


def plain_fields(
    struct: type[msgspec.Struct], raw: dict[str, Any], captures: dict[str, str]
) -> msgspec.Struct | None:
    """The struct, or None when the generic decoder must decide."""
    kinds = exact_types(struct)
    for values in (raw, captures):
        for key, value in values.items():
            kind = type(value)
            if kinds.get(key) is not kind or (kind is int and not _INT_MIN <= value <= _INT_MAX):
                return None
    try:
        return struct(**raw, **captures) if captures.keys().isdisjoint(raw) else None
    except TypeError:  # a required field is missing: the generic decoder words it
        return None
