"""Typed request fields with Vault's weak typing.

A path declares its input as a msgspec Struct. Field annotations carry the weak kind:
`Duration` ("1h" or seconds), `CommaList` ("a,b" or ["a","b"]), plain `bool` ("" -> false,
"true"/"1"/"t"), `int` ("12"), `dict` (object, or a JSON string). `null` means "use the default".
Unknown parameters are reported back as a warning, as Vault does, not rejected.
"""

from __future__ import annotations

import types
import typing
from functools import cache
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from services.secrets.framework.durations import MAX_SECONDS, parse_duration
from shared import jsonbody

DURATION = "duration"
COMMA_LIST = "comma_list"
KV_PAIRS = "kv_pairs"

Duration = Annotated[
    int,
    Meta(
        extra={"weak": DURATION},
        extra_json_schema={"type": ["integer", "string"], "format": "duration"},
    ),
]
CommaList = Annotated[
    list[str],
    Meta(
        extra={"weak": COMMA_LIST},
        extra_json_schema={"type": ["array", "string"], "items": {"type": "string"}},
    ),
]
# "k=v" strings or an object, as Vault's TypeKVPairs.
KVPairs = Annotated[dict[str, str], Meta(extra={"weak": KV_PAIRS})]


def desc(text: str) -> Meta:
    """Field help text: `name: Annotated[str, desc("...")] = ""`."""
    return Meta(description=text)


class FieldError(ValueError):
    """Input that cannot be read as the declared type; the message names the field."""


def _unwrap(tp: Any) -> tuple[Any, str | None, bool]:
    """(base type, weak kind, optional) of an annotation."""
    optional = False
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        optional = len(args) != len(typing.get_args(tp))
        tp = args[0] if len(args) == 1 else tp
    weak = None
    if typing.get_origin(tp) is Annotated:
        for meta in tp.__metadata__:
            if isinstance(meta, Meta) and meta.extra and "weak" in meta.extra:
                weak = meta.extra["weak"]
        tp = typing.get_args(tp)[0]
    return tp, weak, optional


@cache
def field_specs(struct: type[msgspec.Struct]) -> dict[str, tuple[Any, str | None, bool]]:
    hints = typing.get_type_hints(struct, include_extras=True)
    return {f.encode_name: _unwrap(hints[f.name]) for f in msgspec.structs.fields(struct)}


_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
_TRUE = {"1", "t", "true", "yes", "on", "y"}
_FALSE = {"", "0", "f", "false", "no", "off", "n"}


def _weak(name: str, value: Any, base: Any, weak: str | None) -> Any:
    if weak == DURATION:
        try:
            seconds = parse_duration(value)
        except ValueError as exc:
            raise FieldError(f"error converting input for field {name!r}: {exc}") from None
        if seconds < 0:
            raise FieldError(f"field {name!r} cannot be a negative duration")
        if seconds > MAX_SECONDS:
            raise FieldError(
                f"field {name!r}: a duration of {seconds} seconds overflows (at most {MAX_SECONDS})"
            )
        return seconds
    if weak == COMMA_LIST:
        if isinstance(value, str):
            return [p.strip() for p in value.split(",") if p.strip()]
        if isinstance(value, list):
            return [str(v) if not isinstance(v, str) else v.strip() for v in value]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return [str(value)]
        raise FieldError(f"field {name!r} must be a list or a comma-separated string")
    if weak == KV_PAIRS:
        if isinstance(value, dict):
            return {str(k): str(v) for k, v in value.items()}
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list):
            raise FieldError(f"field {name!r} must be an object or a list of key=value")
        out: dict[str, str] = {}
        for item in items:
            if not isinstance(item, str) or "=" not in item:
                raise FieldError(f"field {name!r}: {item!r} is not of the form key=value")
            k, _, v = item.partition("=")
            out[k.strip()] = v.strip()
        return out
    if base is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, (int, float)):
            return value != 0
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise FieldError(f"field {name!r} must be a boolean, got {value!r}")
    if base is int:
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        elif isinstance(value, str):
            text = value.strip()
            if text == "":
                return 0
            try:
                value = int(text, 0) if text.lower().startswith(("0x", "0o", "0b")) else int(text)
            except ValueError:
                raise FieldError(f"field {name!r} must be an integer, got {value!r}") from None
        # Vault's TypeInt is a Go int: a value past int64 is refused, never wrapped.
        if isinstance(value, int) and not _INT_MIN <= value <= _INT_MAX:
            raise FieldError(f"field {name!r}: {value} is out of the 64-bit integer range")
        return value
    if base is str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, (int, float)):
            return str(value)
        return value
    origin = typing.get_origin(base)
    if origin is list or base is list:
        if isinstance(value, str):
            # Vault's TypeStringSlice takes a JSON array in a string, else one element.
            if value.startswith("["):
                try:
                    parsed = jsonbody.loads(value)
                    if isinstance(parsed, list):
                        return parsed
                except ValueError:
                    pass
            return [value] if value else []
        return value
    if origin is dict or base is dict:
        if isinstance(value, str):
            if value.strip() == "":
                return {}
            try:
                return jsonbody.loads(value)
            except ValueError:
                raise FieldError(f"field {name!r} must be an object or a JSON string") from None
        return value
    return value


def _describe(err: msgspec.ValidationError) -> str:
    text = str(err)
    # msgspec says "Object missing required field `x`"; Vault says "missing required field".
    if text.startswith("Object missing required field"):
        field = text.split("`")[1] if "`" in text else "?"
        return f"missing required field {field!r}"
    return text.replace("Expected", "expected").replace("`$.", "`")


def decode_fields(
    struct: type[msgspec.Struct], raw: dict[str, Any], captures: dict[str, str]
) -> tuple[msgspec.Struct, list[str]]:
    """Build the path's field struct from request input; returns (fields, unknown names)."""
    specs = field_specs(struct)
    clean: dict[str, Any] = {}
    unknown: list[str] = []
    merged = {**raw, **captures}  # URL captures beat body values
    for key, value in merged.items():
        spec = specs.get(key)
        if spec is None:
            unknown.append(key)
            continue
        if value is None:
            continue  # null means the default
        base, weak, _ = spec
        # A value of its field's exact plain type is what `_weak` would return (an int still
        # goes through it for the 64-bit range check).
        if weak is None and type(value) is base and base is not int:
            clean[key] = value
        else:
            clean[key] = _weak(key, value, base, weak)
    try:
        return msgspec.convert(clean, struct, strict=False), sorted(unknown)
    except msgspec.ValidationError as exc:
        raise FieldError(_describe(exc)) from None


def query_fields(query: dict[str, list[str]]) -> dict[str, Any]:
    """GET parameters: a single value as a string, repeated keys as a list."""
    return {k: v[0] if len(v) == 1 else v for k, v in query.items()}
