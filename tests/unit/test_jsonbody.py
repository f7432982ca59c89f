"""The shared JSON body policy (shared/jsonbody.py): strict RFC 8259, bounded nesting, lone
surrogates as U+FFFD, and the cheap pre-checks agreeing with the slow truth."""

from __future__ import annotations

import json
import random

import pytest

from shared.jsonbody import (
    MAX_DEPTH,
    BodyError,
    Problem,
    decode,
    nesting_depth,
    replace_lone_surrogates,
)


@pytest.mark.parametrize(
    ("body", "problem", "words"),
    [
        (b'{"ttl": Infinity}', Problem.SYNTAX, "invalid character 'I'"),
        (b'{"ttl": -Infinity}', Problem.SYNTAX, "invalid"),
        (b'{"ttl": NaN}', Problem.SYNTAX, "invalid character 'N'"),
        (b'{"ttl": 1e999}', Problem.RANGE, "out of range"),
        (b'{"ttl": -1e999}', Problem.RANGE, "out of range"),
        (b'{"n": 123456789012345678901234567890}', Problem.RANGE, "64-bit"),
        (b'{"n": -9223372036854775809}', Problem.RANGE, "64-bit"),
        (b'{"n": ' + b"9" * 5000 + b"}", Problem.RANGE, "out of range"),
        (b'{"a": "\xff"}', Problem.ENCODING, "invalid UTF-8 at byte 7"),
        (b'{"a": "\xed\xa0\x80"}', Problem.ENCODING, "UTF-8"),  # a surrogate, UTF-8 encoded
        (b'{"a": "\xc0\xaf"}', Problem.ENCODING, "UTF-8"),  # overlong
        (b'{"ttl": "1h"', Problem.SYNTAX, "truncated"),
        (b'{"a": 1} x', Problem.SYNTAX, "trailing"),
        (b'{"a": 1}{}', Problem.SYNTAX, "trailing"),
        (b'\xef\xbb\xbf{"a": 1}', Problem.SYNTAX, "invalid"),
        (b'{"a": 01}', Problem.SYNTAX, "number"),
        (b"{'a': 1}", Problem.SYNTAX, "keys must be strings"),
        (b'{"a": "\x01"}', Problem.SYNTAX, "invalid"),
        (b"", Problem.SYNTAX, "truncated"),
        (b"[" * 10_000 + b"]" * 10_000, Problem.DEPTH, f"deeper than {MAX_DEPTH}"),
        (b'{"a":' * 10_000 + b"1" + b"}" * 10_000, Problem.DEPTH, "deeper"),
        (b"[" * 10_000, Problem.DEPTH, "deeper"),  # unclosed, never balanced
    ],
)
def test_refused(body: bytes, problem: Problem, words: str) -> None:
    with pytest.raises(BodyError) as err:
        decode(body)
    assert err.value.problem is problem
    assert words in err.value.detail


def test_no_detail_quotes_more_than_a_character_of_input() -> None:
    secret = b"hunter2-" * 4
    for body in (b'{"a": "' + secret + b'", "b": Infinity}', b'{"a": "' + secret + b'\xff"}'):
        with pytest.raises(BodyError) as err:
            decode(body)
        assert b"hunter2" not in err.value.detail.encode()


@pytest.mark.parametrize(
    ("body", "value"),
    [
        (b'{"a": "x\\ud800y"}', {"a": "x\ufffdy"}),
        (b'{"a": "\\udc00"}', {"a": "\ufffd"}),
        (b'{"a": "\\ud800"}', {"a": "\ufffd"}),
        (b'{"a": "\\ud800\\ud800\\udc00"}', {"a": "\ufffd\U00010000"}),
        (b'{"a": "\\ud83d\\ude00"}', {"a": "\U0001f600"}),  # a proper pair stays one character
        (b'{"a": "\\\\ud800"}', {"a": "\\ud800"}),  # an escaped backslash, then plain text
        (b'{"\\ud800": 1}', {"\ufffd": 1}),
    ],
)
def test_lone_surrogates_become_replacement_characters(body: bytes, value: object) -> None:
    assert decode(body) == value


def test_replace_lone_surrogates_leaves_other_escapes_alone() -> None:
    body = b'{"a": "\\n\\"\\\\\\u0041\\uD800"}'
    assert replace_lone_surrogates(body) == b'{"a": "\\n\\"\\\\\\u0041\\ufffd"}'


@pytest.mark.parametrize(
    ("body", "value"),
    [
        (b'{"a": 1, "a": 2}', {"a": 2}),  # the last duplicate wins, as in Go
        (b"null", None),
        (b"  \r\n\t{}  ", {}),
        (b'{"a": 1e308, "b": 1.5e-400}', {"a": 1e308, "b": 0.0}),
        (
            b'{"n": 18446744073709551615, "m": -9223372036854775808}',
            {"n": 2**64 - 1, "m": -(2**63)},
        ),
        (b'{"s": "' + b"x" * 100_000 + b'"}', {"s": "x" * 100_000}),
        (b'{"s": "' + b"[" * 10_000 + b'"}', {"s": "[" * 10_000}),  # brackets in strings
    ],
)
def test_accepted(body: bytes, value: object) -> None:
    assert decode(body) == value


def test_wide_integers_kept_exact_when_asked() -> None:
    body = b'{"d": [123456789012345678901234567890, {"e": -1' + b"0" * 30 + b"}]}"
    assert decode(body, wide_ints="keep") == {
        "d": [123456789012345678901234567890, {"e": -(10**30)}]
    }


def test_the_nesting_limit_is_exact() -> None:
    ok = b"[" * MAX_DEPTH + b"]" * MAX_DEPTH
    assert nesting_depth(decode(ok)) == MAX_DEPTH
    deep = b'{"a":' * (MAX_DEPTH + 1) + b"1" + b"}" * (MAX_DEPTH + 1)
    with pytest.raises(BodyError) as err:
        decode(deep)
    assert err.value.problem is Problem.DEPTH


def test_many_shallow_containers_are_not_too_deep() -> None:
    wide = json.dumps([[{"a": [1]}] for _ in range(5000)]).encode()
    assert len(decode(wide)) == 5000


def _nest(rng: random.Random, depth: int) -> object:
    if depth == 0:
        return rng.choice(['[{"]}', 'q"\\', 1, None, "\\"])
    if rng.random() < 0.5:
        return [_nest(rng, depth - 1) for _ in range(rng.randint(1, 3))]
    return {f"k{i}[": _nest(rng, depth - 1) for i in range(rng.randint(1, 3))}


def _true_depth(v: object) -> int:
    if isinstance(v, list):
        return 1 + max((_true_depth(x) for x in v), default=0)
    if isinstance(v, dict):
        return 1 + max((_true_depth(x) for x in v.values()), default=0)
    return 0


def test_nesting_depth_agrees_with_the_decoded_value() -> None:
    rng = random.Random(7)
    for _ in range(300):
        value = _nest(rng, rng.randint(0, 8))
        assert nesting_depth(value) == _true_depth(value), value
        assert decode(json.dumps(value).encode()) == value
