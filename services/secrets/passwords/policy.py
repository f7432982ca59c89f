"""Password policy documents (HCL or JSON): `length = N` and repeatable
`rule "charset" { charset = "...", min-chars = K }`. Pure: text in, `PasswordPolicy` out."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

import hcl2
from hcl2.utils import SerializationOptions

from shared import jsonbody

MIN_LENGTH = 4
MAX_LENGTH = 100
# One random byte picks one character, so the merged charset must fit in a byte.
MAX_CHARSET = 256

_HCL_OPTIONS = SerializationOptions(
    with_comments=False, strip_string_quotes=True, preserve_heredocs=False
)
_BLOCK_MARKER = "__is_block__"


class PolicyError(ValueError):
    """A policy document that cannot be used; the message says why (it becomes a 400)."""


@dataclass(frozen=True)
class CharsetRule:
    charset: str  # deduplicated, in first-seen order
    min_chars: int


@dataclass(frozen=True)
class PasswordPolicy:
    length: int
    rules: tuple[CharsetRule, ...]
    # Union of every rule's charset: the alphabet passwords are drawn from.
    charset: str


def _dedupe(text: str) -> str:
    return "".join(dict.fromkeys(text))


def decode_document(text: str) -> str:
    """Vault accepts the policy base64-encoded; use the decoded text when it decodes to UTF-8
    (a plain HCL document is never valid base64 because of its spaces and quotes)."""
    stripped = text.strip()
    if not stripped:
        return text
    try:
        raw = base64.b64decode(stripped, validate=True)
        return raw.decode("utf-8")
    except (binascii.Error, ValueError):
        return text


def _load(text: str) -> dict[str, Any]:
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            doc = jsonbody.loads(stripped)
        except ValueError as exc:
            raise PolicyError(f"unable to parse policy: invalid JSON: {exc}") from None
    else:
        try:
            doc = hcl2.loads(text, serialization_options=_HCL_OPTIONS)
        # python-hcl2 raises lark errors and others; bad text must only give PolicyError.
        except Exception as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise PolicyError(f"unable to parse policy: invalid HCL: {first}") from None
    if not isinstance(doc, dict):
        raise PolicyError("unable to parse policy: the document must be an object")
    return doc


def _rule_bodies(raw: Any) -> list[tuple[str, Any]]:
    """(rule type, body) pairs from HCL's list-of-blocks or JSON's object/list forms."""
    out: list[tuple[str, Any]] = []
    items = raw if isinstance(raw, list) else [raw]
    for item in items:
        if not isinstance(item, dict):
            raise PolicyError("unable to parse policy: each rule must be a labelled block")
        for kind, body in item.items():
            if kind == _BLOCK_MARKER:
                continue
            bodies = body if isinstance(body, list) else [body]
            out += [(kind, b) for b in bodies]
    return out


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise PolicyError(f"{name} must be an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise PolicyError(f"{name} must be an integer, got {value!r}")


def parse(text: str) -> PasswordPolicy:
    """Parse and check a policy (not yet whether passwords can be generated in time)."""
    doc = _load(text)
    unknown = sorted(set(doc) - {"length", "rule"})
    if unknown:
        raise PolicyError(f"unable to parse policy: unknown keys {unknown}")
    if "length" not in doc:
        raise PolicyError("unable to parse policy: 'length' is required")
    length = _int(doc["length"], "length")
    if not MIN_LENGTH <= length <= MAX_LENGTH:
        raise PolicyError(f"passwords must be between {MIN_LENGTH} and {MAX_LENGTH} characters")
    rules: list[CharsetRule] = []
    for kind, body in _rule_bodies(doc.get("rule", [])):
        if kind != "charset":
            raise PolicyError(f"unable to parse policy: unrecognized rule type {kind!r}")
        if not isinstance(body, dict):
            raise PolicyError("unable to parse policy: a charset rule must be a block")
        extra = sorted(set(body) - {"charset", "min-chars", "min_chars", _BLOCK_MARKER})
        if extra:
            raise PolicyError(f"unable to parse policy: unknown charset rule keys {extra}")
        charset = body.get("charset", "")
        if not isinstance(charset, str) or not charset:
            raise PolicyError("charset rule: 'charset' must be a non-empty string")
        min_chars = _int(body.get("min-chars", body.get("min_chars", 0)), "min-chars")
        if min_chars < 0:
            raise PolicyError("charset rule: 'min-chars' cannot be negative")
        rules.append(CharsetRule(charset=_dedupe(charset), min_chars=min_chars))
    if not rules:
        raise PolicyError("the policy has no charset rules: at least one is required")
    merged = _dedupe("".join(r.charset for r in rules))
    if len(merged) > MAX_CHARSET:
        raise PolicyError(
            f"the combined charset has {len(merged)} characters; at most {MAX_CHARSET} are allowed"
        )
    if not all(c.isprintable() for c in merged):
        raise PolicyError("charsets may contain printable characters only")
    needed = sum(r.min_chars for r in rules)
    if needed > length:
        raise PolicyError(
            f"the rules require at least {needed} characters, "
            f"more than the length of {length}: the rules are impossible"
        )
    return PasswordPolicy(length=length, rules=tuple(rules), charset=merged)


# Vault's default when an engine names no policy: 20 characters, one of each class.
DEFAULT_POLICY_TEXT = """
length = 20
rule "charset" {
  charset = "abcdefghijklmnopqrstuvwxyz"
  min-chars = 1
}
rule "charset" {
  charset = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
  min-chars = 1
}
rule "charset" {
  charset = "0123456789"
  min-chars = 1
}
rule "charset" {
  charset = "-"
  min-chars = 1
}
"""
DEFAULT_POLICY = parse(DEFAULT_POLICY_TEXT)
