"""ACL policy documents: parse HCL or JSON text into immutable `Policy` values.

This module is pure: no I/O, no state. Matching lives in `services.secrets.acl`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import hcl2
from hcl2.utils import SerializationOptions

CAPABILITIES: frozenset[str] = frozenset(
    {"create", "read", "update", "patch", "delete", "list", "sudo", "deny", "scan"}
)

# The pre-capabilities `policy = "..."` shorthand, expanded the way Vault does.
_WRITE = frozenset({"create", "read", "update", "delete", "list"})
LEGACY_POLICIES: Mapping[str, frozenset[str]] = {
    "deny": frozenset({"deny"}),
    "read": frozenset({"read", "list"}),
    "write": _WRITE,
    "sudo": _WRITE | {"sudo"},
}

_RULE_KEYS = frozenset(
    {
        "capabilities",
        "policy",
        "allowed_parameters",
        "denied_parameters",
        "required_parameters",
        "min_wrapping_ttl",
        "max_wrapping_ttl",
        "comment",
    }
)
_TOP_KEYS = frozenset({"path", "name"})

# hcl2 marks block bodies with this key; JSON documents never carry it.
_BLOCK_MARKER = "__is_block__"

# strip_string_quotes: hcl2 8.x otherwise returns '"read"' with the quotes kept.
_HCL_OPTIONS = SerializationOptions(
    with_comments=False, strip_string_quotes=True, preserve_heredocs=False
)

_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h|d)")
_UNIT_SECONDS: Mapping[str, float] = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1,
    "m": 60,
    "h": 3600,
    "d": 86400,
}
# Beyond int64 seconds a TTL can only be a mistake; it would also overflow datetime maths.
_MAX_SECONDS = 2**63 - 1


class PolicyError(ValueError):
    """A policy document is malformed; the message names the problem."""


@dataclass(frozen=True, slots=True)
class PathRule:
    """One `path "pattern" { ... }` stanza, normalised.

    `capabilities` is exactly {"deny"} when deny was present, since deny overrides the rest.
    Parameter names are lower-cased, as the ACL compares them case-insensitively.
    """

    pattern: str
    capabilities: frozenset[str]
    allowed_parameters: dict[str, list[Any]] = field(default_factory=dict)
    denied_parameters: dict[str, list[Any]] = field(default_factory=dict)
    required_parameters: list[str] = field(default_factory=list)
    min_wrapping_ttl: int = 0
    max_wrapping_ttl: int = 0

    @property
    def is_prefix(self) -> bool:
        return self.pattern.endswith("*")

    @property
    def has_segment_wildcard(self) -> bool:
        return "+" in self.pattern.removesuffix("*").split("/")


@dataclass(frozen=True, slots=True)
class Policy:
    """A named set of path rules. `root` marks the built-in root policy, which has no text."""

    name: str
    rules: list[PathRule] = field(default_factory=list)
    root: bool = False


def parse_policy(text: str, name: str = "") -> Policy:
    """Parse HCL or JSON policy text. Raises PolicyError, and only PolicyError, on bad input."""
    if not isinstance(text, str):
        raise PolicyError(f"policy text must be a string, not {type(text).__name__}")
    document, is_hcl = _load(text)
    return _build(document, name, is_hcl)


def parse_policy_data(document: Mapping[str, Any], name: str = "") -> Policy:
    """Build a Policy from an already-decoded JSON object (e.g. a request body)."""
    return _build(document, name, is_hcl=False)


def parse_duration(value: Any, what: str = "duration") -> int:
    """Seconds from an int or a string such as "90", "90s", "30m", "1h30m" or "1d"."""
    if isinstance(value, bool):
        raise PolicyError(f"{what} must be a number or a duration string, not a boolean")
    if isinstance(value, int):
        seconds = value
    elif isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise PolicyError(f"{what} must be a whole number of seconds, got {value!r}")
        seconds = int(value)
    elif isinstance(value, str):
        seconds = _parse_duration_text(value.strip(), what)
    else:
        raise PolicyError(f"{what} must be a number or a duration string, got {_show(value)}")
    # No repr of the value here: repr of a huge int itself raises ValueError.
    if seconds < 0:
        raise PolicyError(f"{what} must not be negative")
    if seconds > _MAX_SECONDS:
        raise PolicyError(f"{what} is too large")
    return seconds


def _parse_duration_text(text: str, what: str) -> int:
    if text == "":
        return 0
    if len(text) > 64:
        raise PolicyError(f"{what}: duration string is too long")
    if text.isascii() and text.isdigit():
        return int(text)
    total = 0.0
    pos = 0
    for match in _DURATION_PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not math.isfinite(total):
        raise PolicyError(f"{what}: cannot parse duration {text!r} (use e.g. 90, '90s', '1h')")
    return int(total)


def _show(value: Any) -> str:
    """A short, never-failing rendering of a user-supplied value for error messages."""
    if isinstance(value, str) and len(value) <= 80:
        return value
    try:
        text = repr(value)
    except Exception:  # e.g. repr of a huge int raises ValueError
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 80 else text[:77] + "..."


# --- decoding --------------------------------------------------------------------------------


def _load(text: str) -> tuple[Any, bool]:
    """Decode text as JSON when it looks like an object, else as HCL."""
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text), False
        except (ValueError, RecursionError) as exc:
            raise PolicyError(f"invalid JSON policy: {exc}") from None
    try:
        return hcl2.loads(text, serialization_options=_HCL_OPTIONS), True
    # The HCL parser is a third-party black box (lark errors, RecursionError on deep nesting,
    # transformer bugs); the contract is that bad text only ever yields PolicyError.
    except Exception as exc:
        raise PolicyError(f"invalid HCL policy: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    try:
        lines = str(exc).strip().splitlines()
    except Exception:  # a broken __str__ must not escape either
        lines = []
    return lines[0] if lines else type(exc).__name__


# --- building --------------------------------------------------------------------------------


def _build(document: Any, name: str, is_hcl: bool) -> Policy:
    if not isinstance(document, dict):
        raise PolicyError("policy must be an object with a 'path' key")
    unknown = sorted(_show(k) for k in document if k not in _TOP_KEYS)
    if unknown:
        raise PolicyError(f"unknown top-level key(s): {', '.join(unknown)}")
    doc_name = document.get("name", "")
    if not isinstance(doc_name, str):
        raise PolicyError("'name' must be a string")
    rules = [_rule(pattern, body) for pattern, body in _path_entries(document, is_hcl)]
    return Policy(name=name or doc_name, rules=rules)


def _path_entries(document: Mapping[str, Any], is_hcl: bool) -> Iterator[tuple[str, Any]]:
    """Yield (pattern, body) pairs from the map form or hcl2's list-of-blocks form."""
    raw = document.get("path")
    if raw is None:
        return
    # A list is hcl2's block form (or the same shape written in JSON); a dict is the map form.
    blocks = raw if isinstance(raw, list) else [raw]
    for block in blocks:
        if not isinstance(block, dict):
            raise PolicyError("'path' must map patterns to rule objects")
        if is_hcl and _BLOCK_MARKER in block:
            raise PolicyError('path block needs a pattern label: path "<pattern>" { ... }')
        for pattern, body in block.items():
            if not isinstance(pattern, str):
                raise PolicyError(f"path pattern must be a string, got {_show(pattern)}")
            if is_hcl and _has_extra_labels(body):
                raise PolicyError(f"path block {pattern!r} must have exactly one label")
            # Several bodies under one pattern are simply several rules; the ACL merges them.
            for one in body if isinstance(body, list) else [body]:
                yield pattern, _strip_markers(one) if is_hcl else one


def _has_extra_labels(body: Any) -> bool:
    # `path "a" "b" {}` comes out as {"a": {"b": {<marker>}}}: the block sits one level down.
    return (
        isinstance(body, dict)
        and _BLOCK_MARKER not in body
        and any(isinstance(v, dict) and _BLOCK_MARKER in v for v in body.values())
    )


def _strip_markers(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_markers(v) for k, v in value.items() if k != _BLOCK_MARKER}
    if isinstance(value, list):
        return [_strip_markers(v) for v in value]
    return value


def _rule(raw_pattern: str, body: Any) -> PathRule:
    pattern = _pattern(raw_pattern)
    where = f"path {raw_pattern!r}"
    if not isinstance(body, dict):
        raise PolicyError(f"{where}: rule must be an object")
    unknown = sorted(_show(k) for k in body if k not in _RULE_KEYS)
    if unknown:
        raise PolicyError(f"{where}: unknown key(s): {', '.join(unknown)}")

    caps = set(_string_list(body.get("capabilities", []), f"{where}: capabilities"))
    bad = sorted(caps - CAPABILITIES)
    if bad:
        raise PolicyError(f"{where}: unknown capability {bad[0]!r}")
    if "policy" in body:
        legacy = body["policy"]
        if not isinstance(legacy, str) or legacy not in LEGACY_POLICIES:
            raise PolicyError(
                f"{where}: invalid policy {_show(legacy)} (use read, write, deny, sudo)"
            )
        caps |= LEGACY_POLICIES[legacy]
    if "deny" in caps:
        caps = {"deny"}

    min_ttl = parse_duration(body.get("min_wrapping_ttl", 0), f"{where}: min_wrapping_ttl")
    max_ttl = parse_duration(body.get("max_wrapping_ttl", 0), f"{where}: max_wrapping_ttl")
    if max_ttl and min_ttl > max_ttl:
        raise PolicyError(f"{where}: max_wrapping_ttl cannot be less than min_wrapping_ttl")

    return PathRule(
        pattern=pattern,
        capabilities=frozenset(caps),
        allowed_parameters=_parameters(body.get("allowed_parameters"), f"{where}: allowed"),
        denied_parameters=_parameters(body.get("denied_parameters"), f"{where}: denied"),
        required_parameters=_string_list(
            body.get("required_parameters", []), f"{where}: required_parameters"
        ),
        min_wrapping_ttl=min_ttl,
        max_wrapping_ttl=max_ttl,
    )


def _pattern(raw: str) -> str:
    # Request paths never start with "/", so a leading one in a policy is just noise.
    pattern = raw.lstrip("/")
    if "*" in pattern[:-1]:
        raise PolicyError(f"path {raw!r}: '*' is only allowed at the end of a pattern")
    return pattern


def _string_list(value: Any, what: str) -> list[str]:
    if isinstance(value, str):
        raise PolicyError(f"{what} must be a list of strings, not a single string")
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PolicyError(f"{what} must be a list of strings")
    return list(value)


def _parameters(value: Any, what: str) -> dict[str, list[Any]]:
    """Normalise allowed/denied parameters: {name: [values]}; [] means any value."""
    if value is None:
        return {}
    # hcl2 yields `allowed_parameters { ... }` (block syntax) as a list of objects.
    parts = value if isinstance(value, list) else [value]
    result: dict[str, list[Any]] = {}
    for part in parts:
        if not isinstance(part, dict):
            raise PolicyError(f"{what}_parameters must map parameter names to lists")
        for key, values in part.items():
            if not isinstance(key, str):
                raise PolicyError(f"{what}_parameters: parameter name must be a string")
            if not isinstance(values, list):
                raise PolicyError(f"{what}_parameters: value of {key!r} must be a list")
            for item in values:
                if isinstance(item, dict | list):
                    raise PolicyError(
                        f"{what}_parameters: values of {key!r} must be strings, numbers or bools"
                    )
            name = key.lower()
            if name in result and result[name] and values:
                result[name] = result[name] + list(values)
            else:
                # An empty list means "any value", so it absorbs any other list for the name.
                result[name] = [] if name in result else list(values)
    return result
