"""Byte-level body mutations for the hostile-bytes fuzzer: a schema-shaped base body per
operation, then the same body broken in every way a decoder can be hurt (truncation, invalid
UTF-8, lone surrogates, deep nesting, huge and non-finite numbers, duplicate keys, huge strings)
and sent under wrong content types. Pure: no I/O, so the cases are the same on every run."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

JSON_TYPES = ("application/json", "application/vnd.api+json")


@dataclass(frozen=True)
class Operation:
    api: str
    method: str
    template: str  # the document's path, with {placeholders}
    path: str  # a concrete path to send
    schema: dict[str, Any] | None  # the JSON request body schema, if the document has one
    content_type: str

    @property
    def name(self) -> str:
        return f"{self.api} {self.method} {self.template}"


@dataclass(frozen=True)
class Case:
    name: str
    body: bytes
    content_type: str | None  # None: send no Content-Type at all


# --- operations from an OpenAPI document ---

_PARAM = re.compile(r"\{([^}]+)\}")


def _resolve(doc: dict[str, Any], schema: Any, seen: int = 0) -> Any:
    while isinstance(schema, dict) and "$ref" in schema and seen < 20:
        node: Any = doc
        for part in schema["$ref"].lstrip("#/").split("/"):
            node = node.get(part, {}) if isinstance(node, dict) else {}
        schema, seen = node, seen + 1
    return schema


Examples = Callable[[str, str], dict[str, str]]


def operations(
    api: str,
    doc: dict[str, Any],
    examples: Examples | None = None,
    exclude: re.Pattern[str] | None = None,
) -> list[Operation]:
    """Every operation of `doc`, its path parameters filled from `examples(template, method)`
    (by name; "fuzz" when it has none)."""
    out = []
    for template, item in sorted(doc.get("paths", {}).items()):
        if exclude is not None and exclude.search(template):
            continue
        for method, op in sorted(item.items()):
            if method.upper() not in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "LIST"):
                continue
            known = examples(template, method.upper()) if examples else {}
            path = _PARAM.sub(lambda m, k=known: k.get(m.group(1), "fuzz"), template)  # type: ignore[misc]
            schema, ctype = None, JSON_TYPES[api == "workspace"]
            content = ((op or {}).get("requestBody") or {}).get("content") or {}
            for media in (*JSON_TYPES, *content):
                if media in content:
                    schema = _resolve(doc, content[media].get("schema"))
                    ctype = media
                    break
            out.append(Operation(api, method.upper(), template, path, schema, ctype))
    return out


# --- a base body that looks like what the schema wants ---


def sample(doc: dict[str, Any], schema: Any, depth: int = 0) -> Any:
    """A small value of `schema`'s shape; every property present, so mutations reach them."""
    schema = _resolve(doc, schema)
    if not isinstance(schema, dict) or depth > 6:
        return "x"
    if "example" in schema:
        return schema["example"]
    for key in ("oneOf", "anyOf", "allOf"):
        if schema.get(key):
            return sample(doc, schema[key][0], depth + 1)
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        return {k: sample(doc, v, depth + 1) for k, v in list(props.items())[:40]}
    if kind == "array":
        return [sample(doc, schema.get("items"), depth + 1)]
    if kind == "integer":
        return 1
    if kind == "number":
        return 1.5
    if kind == "boolean":
        return True
    return "x"


# --- rendering with raw leaves ---


def render(value: Any, leaf: Callable[[Any], bytes] | None = None, dup: bool = False) -> bytes:
    """JSON bytes of `value`, each scalar replaced by `leaf(scalar)` when given; with `dup`,
    every key appears twice (first with a value of the wrong type)."""
    if isinstance(value, dict):
        parts = []
        for k, v in value.items():
            key = json.dumps(k).encode()
            if dup:
                parts.append(key + b":[null]")
            parts.append(key + b":" + render(v, leaf, dup))
        return b"{" + b",".join(parts) + b"}"
    if isinstance(value, list):
        return b"[" + b",".join(render(v, leaf, dup) for v in value) + b"]"
    return leaf(value) if leaf else json.dumps(value).encode()


DEEP = 5_000
HUGE_STRING = 1024 * 1024

# Each a raw JSON token put in place of every scalar of the base body.
LEAVES: dict[str, bytes] = {
    "invalid-utf8": b'"\xff\xfe\xc0\xaf"',
    "utf8-encoded-surrogate": b'"\xed\xa0\x80"',
    "lone-surrogate": b'"x\\ud800y\\udfff"',
    "nul-escape": b'"a\\u0000b"',
    "control-char": b'"a\x01b"',
    "nan": b"NaN",
    "infinity": b"Infinity",
    "-infinity": b"-Infinity",
    "1e999": b"1e999",
    "-1e999": b"-1e999",
    "wide-int": b"1" + b"0" * 30,
    "int64-overflow": b"9223372036854775808",
    "uint64-overflow": b"18446744073709551616",
    "int-4301-digits": b"9" * 4301,
    "float-for-int": b"1.5e300",
    "negative": b"-1",
    "leading-zero": b"007",
    "deep-array": b"[" * DEEP + b"]" * DEEP,
    "empty-array": b"[]",
    "empty-object": b"{}",
    "null": b"null",
    "true": b"true",
    "single-quoted": b"'x'",
    "bare-word": b"undefined",
}


def _first_leaf(token: bytes) -> Callable[[Any], bytes]:
    """`token` for the first scalar, the original for the rest: one huge value per body."""
    used = []

    def leaf(value: Any) -> bytes:
        if used:
            return json.dumps(value).encode()
        used.append(True)
        return token

    return leaf


def cases(base: Any, content_type: str) -> Iterator[Case]:
    """Every mutation of `base` (a JSON value), then `base` under wrong content types."""
    raw = render(base)
    yield Case("empty", b"", content_type)
    yield Case("whitespace", b" \r\n\t ", content_type)
    yield Case("truncated", raw[: max(1, len(raw) // 2)], content_type)
    yield Case("truncated-1", raw[:-1], content_type)
    yield Case("trailing-garbage", raw + b" }x", content_type)
    yield Case("two-values", raw + raw, content_type)
    yield Case("bom", b"\xef\xbb\xbf" + raw, content_type)
    yield Case("utf16", raw.decode("utf-8", "replace").encode("utf-16"), content_type)
    yield Case("nul-bytes", raw.replace(b":", b":\x00", 1) or b"\x00", content_type)
    yield Case("duplicate-keys", render(base, dup=True), content_type)
    yield Case("deep-object", b'{"a":' * 10_000 + b"1" + b"}" * 10_000, content_type)
    yield Case("deep-array", b"[" * 10_000 + b"]" * 10_000, content_type)
    yield Case("deep-unclosed", b"[" * 100_000, content_type)
    yield Case("not-an-object", b"[1,2,3]", content_type)
    yield Case("a-string", b'"x"', content_type)
    yield Case("a-number", b"1e999", content_type)
    yield Case(
        "huge-string", render(base, _first_leaf(b'"' + b"A" * HUGE_STRING + b'"')), content_type
    )
    for name, token in LEAVES.items():
        yield Case(name, render(base, lambda _, t=token: t), content_type)  # type: ignore[misc]
    for ctype in (
        None,
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/json; charset=utf-16",
        "application/xml",
        "application/json;;;",
    ):
        yield Case(f"content-type {ctype!r}", raw, ctype)


def random_cases(base: Any, content_type: str, rng: random.Random, count: int) -> Iterator[Case]:
    """`count` blind byte-level mutants of `base`: bytes flipped, inserted, deleted, a slice
    duplicated, cut short; the bytes inserted favour those that matter to a JSON decoder."""
    raw = render(base)
    tokens = [
        b"\\",
        b'"',
        b"[",
        b"{",
        b"}",
        b"]",
        b",",
        b":",
        b"\\u",
        b"\xff",
        b"\x00",
        b"e9",
        b"-",
    ]
    for n in range(count):
        body = bytearray(raw)
        for _ in range(rng.randint(1, 4)):
            at = rng.randint(0, len(body))
            kind = rng.randrange(5)
            if kind == 0 and body:
                body[min(at, len(body) - 1)] = rng.randrange(256)
            elif kind == 1:
                body[at:at] = rng.choice(tokens) * rng.choice((1, 1, 2, 300))
            elif kind == 2:
                del body[at : at + rng.randint(1, 8)]
            elif kind == 3:
                body[at:at] = body[at : at + rng.randint(1, 64)]
            else:
                del body[at:]
        yield Case(f"random-{n}", bytes(body), content_type)
