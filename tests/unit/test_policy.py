"""Parsing ACL policy documents (HCL and JSON) into Policy values."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.secrets.policy import (
    CAPABILITIES,
    PathRule,
    Policy,
    PolicyError,
    parse_duration,
    parse_policy,
    parse_policy_data,
)


def only_rule(text: str) -> PathRule:
    policy = parse_policy(text)
    assert len(policy.rules) == 1
    return policy.rules[0]


# --- HCL ---------------------------------------------------------------------------------------


def test_hcl_basic_blocks_in_order() -> None:
    policy = parse_policy(
        """
        # a comment
        path "secret/data/*" {
          capabilities = ["create", "read", "update"]
        }
        path "sys/mounts" { capabilities = ["list"] }  // trailing comment
        """,
        name="dev",
    )
    assert policy == Policy(
        name="dev",
        rules=[
            PathRule("secret/data/*", frozenset({"create", "read", "update"})),
            PathRule("sys/mounts", frozenset({"list"})),
        ],
    )
    assert policy.root is False


def test_hcl_strings_are_unquoted_and_unescaped() -> None:
    rule = only_rule(r'path "a\"b/c" { capabilities = ["read"] }')
    assert rule.pattern == 'a"b/c'
    assert rule.capabilities == {"read"}


def test_every_capability_is_accepted() -> None:
    caps = sorted(CAPABILITIES - {"deny"})
    rule = only_rule(f'path "x" {{ capabilities = {json.dumps(caps)} }}')
    assert rule.capabilities == set(caps)
    assert "scan" in rule.capabilities


def test_deny_overrides_other_capabilities_in_a_rule() -> None:
    rule = only_rule('path "x" { capabilities = ["read", "deny", "sudo"] }')
    assert rule.capabilities == {"deny"}


def test_rule_without_capabilities_is_kept_empty() -> None:
    assert only_rule('path "x" {}').capabilities == frozenset()


@pytest.mark.parametrize(
    ("legacy", "expected"),
    [
        ("deny", {"deny"}),
        ("read", {"read", "list"}),
        ("write", {"create", "read", "update", "delete", "list"}),
        ("sudo", {"create", "read", "update", "delete", "list", "sudo"}),
    ],
)
def test_legacy_policy_shorthand(legacy: str, expected: set[str]) -> None:
    assert only_rule(f'path "x" {{ policy = "{legacy}" }}').capabilities == expected


def test_legacy_policy_unions_with_capabilities() -> None:
    rule = only_rule('path "x" {\n policy = "read"\n capabilities = ["patch"]\n}')
    assert rule.capabilities == {"read", "list", "patch"}


def test_legacy_deny_wins_over_capabilities() -> None:
    rule = only_rule('path "x" {\n policy = "deny"\n capabilities = ["read"]\n}')
    assert rule.capabilities == {"deny"}


def test_parameters_and_wrapping_ttls() -> None:
    rule = only_rule(
        """
        path "secret/foo" {
          capabilities = ["create", "update"]
          allowed_parameters = {
            "Bar" = ["zip", "zap-*"]
            "*"   = []
          }
          denied_parameters = {
            "baz" = []
          }
          required_parameters = ["bar", "ttl"]
          min_wrapping_ttl = "1m"
          max_wrapping_ttl = 3600
          comment = "ignored"
        }
        """
    )
    # Names are lower-cased because the ACL compares them case-insensitively.
    assert rule.allowed_parameters == {"bar": ["zip", "zap-*"], "*": []}
    assert rule.denied_parameters == {"baz": []}
    assert rule.required_parameters == ["bar", "ttl"]
    assert (rule.min_wrapping_ttl, rule.max_wrapping_ttl) == (60, 3600)


def test_parameter_values_may_be_numbers_and_bools() -> None:
    rule = only_rule('path "x" { allowed_parameters = { "n" = [1, 2.5, true] } }')
    assert rule.allowed_parameters == {"n": [1, 2.5, True]}


def test_parameters_in_block_syntax() -> None:
    rule = only_rule('path "x" {\n allowed_parameters {\n foo = ["a"]\n }\n}')
    assert rule.allowed_parameters == {"foo": ["a"]}


def test_parameter_names_differing_in_case_are_merged() -> None:
    rule = only_rule('path "x" { allowed_parameters = { "A" = ["1"], "a" = ["2"], "b" = [] } }')
    assert rule.allowed_parameters == {"a": ["1", "2"], "b": []}


def test_repeated_pattern_yields_separate_rules() -> None:
    policy = parse_policy(
        'path "a" { capabilities = ["read"] }\npath "a" { capabilities = ["list"] }'
    )
    assert [r.capabilities for r in policy.rules] == [{"read"}, {"list"}]


def test_leading_slash_is_dropped() -> None:
    assert only_rule('path "/secret/*" { capabilities = ["read"] }').pattern == "secret/*"


def test_pattern_flags() -> None:
    assert PathRule("a/*", frozenset()).is_prefix
    assert not PathRule("a/b", frozenset()).is_prefix
    assert PathRule("a/+/b", frozenset()).has_segment_wildcard
    assert PathRule("a/+*", frozenset()).has_segment_wildcard
    # `+` inside a segment is a literal character, not a wildcard.
    assert not PathRule("a/b+c", frozenset()).has_segment_wildcard


def test_top_level_name_is_used_when_no_name_given() -> None:
    assert parse_policy('name = "ops"\npath "a" {}').name == "ops"
    assert parse_policy('name = "ops"\npath "a" {}', name="given").name == "given"


@pytest.mark.parametrize("text", ["", "   \n", "# only a comment\n", "{}", '{"path": {}}'])
def test_empty_policy_is_allowed(text: str) -> None:
    assert parse_policy(text, name="empty") == Policy(name="empty", rules=[])


def test_path_attribute_form_in_hcl() -> None:
    rule = only_rule('path = { "a/b" = { capabilities = ["read"] } }')
    assert rule == PathRule("a/b", frozenset({"read"}))


# --- JSON --------------------------------------------------------------------------------------


def test_json_map_form() -> None:
    doc = {
        "path": {
            "secret/*": {"capabilities": ["read", "list"], "max_wrapping_ttl": "1h"},
            "sys/+/x": {"policy": "write"},
        }
    }
    policy = parse_policy(json.dumps(doc))
    assert [r.pattern for r in policy.rules] == ["secret/*", "sys/+/x"]
    assert policy.rules[0].max_wrapping_ttl == 3600
    assert "update" in policy.rules[1].capabilities


def test_json_list_form_like_hcl2_output() -> None:
    doc = {"path": [{"a": {"capabilities": ["read"]}}, {"a": {"capabilities": ["list"]}}]}
    policy = parse_policy(json.dumps(doc))
    assert [(r.pattern, r.capabilities) for r in policy.rules] == [
        ("a", {"read"}),
        ("a", {"list"}),
    ]


def test_json_body_list_form() -> None:
    doc = {"path": {"a": [{"capabilities": ["read"]}, {"capabilities": ["update"]}]}}
    assert len(parse_policy(json.dumps(doc)).rules) == 2


def test_parse_policy_data_takes_decoded_objects() -> None:
    policy = parse_policy_data({"path": {"x/*": {"capabilities": ["sudo"]}}}, name="n")
    assert policy == Policy("n", [PathRule("x/*", frozenset({"sudo"}))])


def test_hcl_and_json_agree() -> None:
    hcl = """
    path "kv/+/team*" {
      capabilities = ["read", "list"]
      denied_parameters = { "x" = ["a"] }
      min_wrapping_ttl = "90s"
    }
    """
    doc = {
        "path": {
            "kv/+/team*": {
                "capabilities": ["read", "list"],
                "denied_parameters": {"x": ["a"]},
                "min_wrapping_ttl": "90s",
            }
        }
    }
    assert parse_policy(hcl) == parse_policy(json.dumps(doc))


# --- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('path "a" {', "invalid HCL"),
        ('path "a" { capabilities = ["read" }', "invalid HCL"),
        ("{", "invalid JSON"),
        ('{"path": {"a": }}', "invalid JSON"),
        ('path "a" { capabilities = ["fly"] }', "unknown capability 'fly'"),
        ('path "a" { capabilities = ["READ"] }', "unknown capability 'READ'"),
        ('path "a*b" { capabilities = ["read"] }', "'*' is only allowed at the end"),
        ('path "*/x" {}', "'*' is only allowed at the end"),
        ('path "a/**" {}', "'*' is only allowed at the end"),
        ('path "a" { capabilities = "read" }', "must be a list of strings"),
        ('path "a" { capabilities = [1] }', "must be a list of strings"),
        ('path "a" { policy = "admin" }', "invalid policy"),
        ('path "a" { policy = ["read"] }', "invalid policy"),
        ('path "a" { colour = "red" }', "unknown key(s): colour"),
        ('path "a" { min_wrapping_ttl = "soon" }', "cannot parse duration"),
        ('path "a" { max_wrapping_ttl = true }', "not a boolean"),
        ('path "a" { max_wrapping_ttl = -5 }', "must not be negative"),
        ('path "a" {\n min_wrapping_ttl = "2h"\n max_wrapping_ttl = "1h"\n}', "cannot be less"),
        ('path "a" { allowed_parameters = ["x"] }', "must map parameter names"),
        ('path "a" { allowed_parameters = { "x" = "y" } }', "must be a list"),
        ('path "a" { denied_parameters = { "x" = [["y"]] } }', "strings, numbers or bools"),
        ('path "a" { required_parameters = "x" }', "must be a list of strings"),
        ("path {}", "needs a pattern label"),
        ('path "a" "b" {}', "exactly one label"),
        ('policies = ["x"]', "unknown top-level key"),
        ("name = 3", "'name' must be a string"),
        ('{"path": 3}', "must map patterns"),
        ('{"path": {"a": 3}}', "rule must be an object"),
        ('{"path": {"a": {"capabilities": null}}}', "must be a list of strings"),
        ('{"path": [1]}', "must map patterns"),
        ("[]", "invalid HCL"),
    ],
)
def test_errors_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(PolicyError) as info:
        parse_policy(text)
    assert message in str(info.value)


def test_policy_error_is_a_value_error() -> None:
    assert issubclass(PolicyError, ValueError)


def test_non_string_input_is_a_policy_error() -> None:
    with pytest.raises(PolicyError):
        parse_policy(b'path "a" {}')  # type: ignore[arg-type]


def test_huge_numbers_are_policy_errors() -> None:
    doc = {"path": {"a": {"max_wrapping_ttl": 10**5000, "min_wrapping_ttl": -(10**5000)}}}
    with pytest.raises(PolicyError):
        parse_policy_data(doc)
    with pytest.raises(PolicyError):
        parse_policy('path "a" { max_wrapping_ttl = ' + "9" * 5000 + " }")
    for bad in [
        {"path": {"a": {"policy": 10**5000}}},
        {"path": {"a": {"max_wrapping_ttl": [10**5000]}}},
        {"path": {10**5000: {}}},
        {10**5000: 1},
    ]:
        with pytest.raises(PolicyError):
            parse_policy_data(bad)


def test_parse_policy_data_rejects_non_objects() -> None:
    with pytest.raises(PolicyError):
        parse_policy_data(["path"])  # type: ignore[arg-type]


# --- durations ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (0, 0),
        (90, 90),
        (90.0, 90),
        ("", 0),
        ("90", 90),
        ("90s", 90),
        ("30m", 1800),
        ("1h", 3600),
        ("1h30m", 5400),
        ("1.5h", 5400),
        ("2d", 172800),
        ("1500ms", 1),
        (" 5m ", 300),
    ],
)
def test_parse_duration(value: Any, seconds: int) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize(
    "value", ["1x", "h", "1h 30m", "-1s", "1e3", "1" * 80, 1.5, float("inf"), None, [], True]
)
def test_parse_duration_rejects(value: Any) -> None:
    with pytest.raises(PolicyError):
        parse_duration(value)


# --- fuzzing -----------------------------------------------------------------------------------

# Fragments that reach deep into the parser and the builder rather than failing at byte one.
_FRAGMENTS = [
    'path "',
    "secret/",
    "+",
    "*",
    "/",
    '" {',
    "}",
    "{",
    "capabilities = [",
    '"read", ',
    '"deny"',
    '"sudo"',
    "]",
    "policy = ",
    '"write"',
    "allowed_parameters = {",
    "denied_parameters",
    "required_parameters = ",
    '"*" = []',
    "min_wrapping_ttl = ",
    "max_wrapping_ttl = ",
    '"1h"',
    "-3",
    "1e999",
    "9" * 30,
    "true",
    "null",
    '"',
    "\\",
    "${",
    "\n",
    " ",
    "=",
    ",",
    ":",
    '{"path": ',
    "[",
    "#",
    "<<EOT\n",
    "EOT\n",
]


def _assert_policy_or_error(text: str) -> None:
    try:
        result = parse_policy(text)
    except PolicyError:
        return
    assert isinstance(result, Policy)
    for rule in result.rules:
        assert rule.capabilities <= CAPABILITIES


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text())
def test_fuzz_any_text_returns_policy_or_policy_error(text: str) -> None:
    _assert_policy_or_error(text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_FRAGMENTS), max_size=40).map("".join))
def test_fuzz_policy_like_text_returns_policy_or_policy_error(text: str) -> None:
    _assert_policy_or_error(text)


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(["path", "capabilities", "policy", "a/*", "allowed_parameters", "*"])
            | st.text(max_size=4),
            inner,
            max_size=4,
        )
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["path", "name", "x"]), _json_values, max_size=2))
def test_fuzz_json_documents_return_policy_or_policy_error(doc: dict[str, Any]) -> None:
    _assert_policy_or_error(json.dumps(doc))
