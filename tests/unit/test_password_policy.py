"""Password policies: parsing (HCL, JSON, base64), validation errors, and generation that obeys
the rules, is unbiased and gives up in bounded time."""

from __future__ import annotations

import base64
import collections
import json
import time

import pytest

from services.secrets.passwords import (
    DEFAULT_POLICY,
    GenerationTimeout,
    PolicyError,
    generate,
    parse,
)
from services.secrets.passwords.generator import satisfies
from services.secrets.passwords.policy import decode_document

HCL = """
length = 24
rule "charset" {
  charset = "abcdefghijklmnopqrstuvwxyz"
  min-chars = 2
}
rule "charset" {
  charset = "0123456789"
  min-chars = 3
}
rule "charset" {
  charset = "!@#$%^&*"
  min-chars = 1
}
"""


def test_hcl_policy_parses_and_generates_obeying_rules() -> None:
    policy = parse(HCL)
    assert policy.length == 24
    assert [r.min_chars for r in policy.rules] == [2, 3, 1]
    for _ in range(200):
        pw = generate(policy)
        assert len(pw) == 24
        assert sum(c.isdigit() for c in pw) >= 3
        assert sum(c.islower() for c in pw) >= 2
        assert any(c in "!@#$%^&*" for c in pw)
        assert set(pw) <= set(policy.charset)


def test_json_forms_and_duplicates_are_merged() -> None:
    doc = {
        "length": 8,
        "rule": [{"charset": {"charset": "aab", "min-chars": 1}}, {"charset": {"charset": "bc"}}],
    }
    policy = parse(json.dumps(doc))
    assert policy.charset == "abc"
    obj = {"length": 8, "rule": {"charset": [{"charset": "xy", "min-chars": 1}]}}
    assert parse(json.dumps(obj)).charset == "xy"


def test_base64_document_is_decoded() -> None:
    encoded = base64.b64encode(HCL.encode()).decode()
    assert decode_document(encoded) == HCL
    assert decode_document(HCL) == HCL


def test_default_policy() -> None:
    pw = generate(DEFAULT_POLICY)
    assert len(pw) == 20 and "-" in pw
    assert any(c.isupper() for c in pw) and any(c.islower() for c in pw)
    assert any(c.isdigit() for c in pw)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("length = 20", "no charset rules"),
        ('length = 20\nrule "charset" {\n charset = ""\n}', "non-empty"),
        ('length = 3\nrule "charset" {\n charset = "ab"\n}', "between 4 and 100"),
        ('length = 101\nrule "charset" {\n charset = "ab"\n}', "between 4 and 100"),
        ('length = 4\nrule "charset" {\n charset = "ab"\n min-chars = 5\n}', "impossible"),
        ('rule "charset" {\n charset = "ab"\n}', "'length' is required"),
        ('length = 8\nrule "other" {\n charset = "ab"\n}', "unrecognized rule type"),
        ("length = {{", "invalid HCL"),
        ('{"length": 8, "rule": ', "invalid JSON"),
        ('length = 8\nrule "charset" {\n charset = "ab"\n min-chars = -1\n}', "negative"),
    ],
)
def test_bad_policies_are_rejected(text: str, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        parse(text)


def test_overly_restrictive_policy_times_out_quickly() -> None:
    # 30 of 100 characters from a 1-in-95 subset: essentially never met by chance.
    letters = "".join(chr(c) for c in range(33, 127) if chr(c) != "~")
    doc = {
        "length": 100,
        "rule": [{"charset": {"charset": letters}}, {"charset": {"charset": "~", "min-chars": 30}}],
    }
    policy = parse(json.dumps(doc))
    started = time.monotonic()
    with pytest.raises(GenerationTimeout, match="impossible"):
        generate(policy, timeout=0.2)
    assert time.monotonic() - started < 2


def test_generation_is_unbiased() -> None:
    # Three characters do not divide 256: a naive `byte % 3` would favour "a".
    policy = parse('length = 4\nrule "charset" {\n charset = "abc"\n}')
    counts: collections.Counter[str] = collections.Counter()
    for _ in range(3000):
        counts.update(generate(policy))
    total = sum(counts.values())
    for ch in "abc":
        assert abs(counts[ch] / total - 1 / 3) < 0.02, counts


def test_satisfies() -> None:
    policy = parse(HCL)
    assert not satisfies(policy, "a" * 24)
    assert satisfies(policy, "ab123!" + "a" * 18)
