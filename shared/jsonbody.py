"""The one JSON decoding policy for request bodies of all three APIs.

Strict RFC 8259: no NaN or Infinity, no trailing data, no byte-order mark; a number that no
64-bit float holds (1e999) is refused; invalid UTF-8 is refused; a lone UTF-16 surrogate escape
(`"\\ud800"`) becomes U+FFFD, as OpenBao (Go's encoding/json) stores it; nesting deeper than
MAX_DEPTH is refused; duplicate keys keep the last value, as Go's decoder (every anchor) does.

Each service words a `BodyError` in its own API's error shape. The common case costs one
msgspec decode plus a few C-speed byte counts: every slower check runs only when those counts
say it could matter.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Any, Literal

import msgspec

MAX_DEPTH = 256
# Integers outside [-2**63, 2**64 - 1] fit no Go integer, nor msgpack (which carries bodies on
# to the logs); msgpack's encoder is the fast test for them.
WideInts = Literal["reject", "keep"]
_WIDE_DIGITS = 19  # no shorter body can hold such an integer

_decoder = msgspec.json.Decoder()
_msgpack = msgspec.msgpack.Encoder()

# A pair of surrogate escapes, any surrogate escape, or any other escape: scanning left to
# right keeps `\\` pairs whole, so `\\ud800` (an escaped backslash, then text) is left alone.
_ESCAPES = re.compile(
    rb"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"
    rb"|\\u[dD][89a-fA-F][0-9a-fA-F]{2}"
    rb"|\\."
)
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


class Problem(Enum):
    SYNTAX = "syntax"  # not JSON (truncated, NaN, trailing data, ...)
    ENCODING = "encoding"  # not UTF-8
    RANGE = "range"  # a number no field can hold
    DEPTH = "depth"  # nested deeper than MAX_DEPTH


class BodyError(ValueError):
    """A body the policy refuses; `detail` says what is wrong, never quoting more than a byte."""

    def __init__(self, problem: Problem, detail: str) -> None:
        super().__init__(detail)
        self.problem = problem
        self.detail = detail


def nesting_depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """How deep a decoded value nests (a scalar is 0), counted up to limit + 1. Iterative, and
    linear in the number of containers: a depth check on the bytes would be depth x size."""
    if type(value) is not dict and type(value) is not list:
        return 0
    deepest = 1
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > deepest:
            deepest = depth
            if depth > limit:
                return depth
        for child in node.values() if type(node) is dict else node:
            if type(child) is dict or type(child) is list:
                stack.append((child, depth + 1))
    return deepest


def replace_lone_surrogates(body: bytes) -> bytes:
    """Every `\\uD800`-`\\uDFFF` escape that is not half of a proper pair becomes `\\uFFFD`."""

    def one(m: re.Match[bytes]) -> bytes:
        text = m.group()
        if len(text) == 6:
            return b"\\ufffd"
        return text

    return _ESCAPES.sub(one, body)


def _has_wide_int(obj: Any) -> bool:
    try:
        _msgpack.encode(obj)  # a C-speed walk that refuses integers past 64 bits
    except OverflowError:
        return True
    return False


def _decode(body: bytes) -> Any:
    try:
        return _decoder.decode(body)
    except UnicodeDecodeError:
        raise BodyError(Problem.ENCODING, f"invalid UTF-8 at byte {_bad_utf8_at(body)}") from None
    except msgspec.ValidationError as exc:
        # The only validation an untyped decode does: a number past float64 or 4,300 digits.
        what = "an integer" if str(exc).startswith("Integer") else "a number"
        raise BodyError(Problem.RANGE, f"{what} is out of range") from None
    except RecursionError:
        raise BodyError(Problem.DEPTH, f"nested deeper than {MAX_DEPTH} levels") from None
    except msgspec.DecodeError as exc:
        raise BodyError(Problem.SYNTAX, _syntax_detail(body, str(exc))) from None


def _bad_utf8_at(body: bytes) -> int:
    try:
        body.decode()
    except UnicodeDecodeError as exc:
        return exc.start
    return 0


_AT_BYTE = re.compile(r"\(byte (\d+)\)$")


def _syntax_detail(body: bytes, message: str) -> str:
    """msgspec's message, lower-cased, naming the offending character when it is printable."""
    detail = message.removeprefix("JSON is malformed: ")
    detail = detail[:1].lower() + detail[1:]
    m = _AT_BYTE.search(detail)
    if m and detail.startswith("invalid character"):
        at = int(m.group(1))
        ch = body[at : at + 1]
        if ch and 0x21 <= ch[0] < 0x7F:
            return f"invalid character {ch.decode()!r} at byte {at}"
    return detail


def decode(body: bytes, *, wide_ints: WideInts = "reject") -> Any:
    """The value of a JSON request body under the policy; raises BodyError.

    `wide_ints`: "reject" refuses integers outside the 64-bit range (no Go integer field, nor
    msgpack, holds them); "keep" keeps them exact, each typed field then checking its own range
    (the secrets API: KV data round-trips them)."""
    try:
        value = _decode(body)  # msgspec refuses (RecursionError) well before the stack is at risk
    except BodyError as err:
        if err.problem is not Problem.SYNTAX or not _SURROGATE.search(body):
            raise
        value = _decode(replace_lone_surrogates(body))
    # Fewer brackets than the limit cannot nest past it: most bodies stop at the count.
    if body.count(b"[") + body.count(b"{") > MAX_DEPTH and nesting_depth(value) > MAX_DEPTH:
        raise BodyError(Problem.DEPTH, f"nested deeper than {MAX_DEPTH} levels")
    if wide_ints == "reject" and len(body) >= _WIDE_DIGITS and _has_wide_int(value):
        raise BodyError(Problem.RANGE, "an integer is out of the 64-bit range")
    return value


def loads(text: str | bytes, *, wide_ints: WideInts = "keep") -> Any:
    """`decode` for JSON carried inside a field (a map given as a string): the same policy, so
    it cannot reach deeper or further than the body could. BodyError is a ValueError."""
    return decode(text.encode() if isinstance(text, str) else text, wide_ints=wide_ints)
