"""ACL matching: exact vs glob rules, priority, `+`/`*`, deny, sudo, merging, parameters."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.secrets.acl import ACL, DEFAULT_POLICY, Decision, builtin_policy
from services.secrets.policy import PathRule, Policy, parse_policy


def acl(*texts: str) -> ACL:
    return ACL([parse_policy(text, name=f"p{i}") for i, text in enumerate(texts)])


def rule(pattern: str, *caps: str) -> str:
    quoted = ", ".join(f'"{c}"' for c in caps)
    return f'path "{pattern}" {{ capabilities = [{quoted}] }}\n'


# --- exact and prefix rules --------------------------------------------------------------------


def test_no_rules_denies_everything() -> None:
    empty = ACL([])
    assert empty.capabilities("secret/foo") == {"deny"}
    assert not empty.allows("secret/foo", "read")
    decision = empty.check("secret/foo", "read")
    assert decision == Decision(
        allowed=False, sudo=False, reason="no policy grants access to this path"
    )


def test_exact_rule_matches_only_its_path() -> None:
    a = acl(rule("secret/foo", "read"))
    assert a.allows("secret/foo", "read")
    assert not a.allows("secret/foo/bar", "read")
    assert not a.allows("secret/fo", "read")
    assert not a.allows("secret/foo", "update")


def test_prefix_rule_matches_anything_below() -> None:
    a = acl(rule("secret/*", "read"))
    assert a.allows("secret/", "read")
    assert a.allows("secret/a/b/c", "read")
    assert not a.allows("secret", "read")
    assert not a.allows("other/x", "read")


def test_prefix_glob_need_not_end_at_a_slash() -> None:
    a = acl(rule("secret/team-*", "read"))
    assert a.allows("secret/team-a/x", "read")
    assert not a.allows("secret/teamb", "read")


def test_star_alone_matches_every_path() -> None:
    a = acl(rule("*", "read"))
    assert a.allows("", "read")
    assert a.allows("anything/at/all", "read")


def test_exact_rule_beats_any_glob() -> None:
    a = acl(rule("secret/*", "deny"), rule("secret/foo", "read"), rule("secret/foo*", "deny"))
    assert a.allows("secret/foo", "read")
    assert a.capabilities("secret/foo") == {"read"}
    assert a.capabilities("secret/foobar") == {"deny"}


def test_longest_prefix_wins() -> None:
    a = acl(rule("secret/*", "read", "list"), rule("secret/super/*", "deny"))
    assert a.allows("secret/public", "read")
    assert not a.allows("secret/super/x", "read")
    # Only the winning rule counts: a broader grant does not leak through a narrower rule.
    b = acl(rule("secret/*", "read"), rule("secret/a/*", "update"))
    assert b.capabilities("secret/a/x") == {"update"}
    assert not b.allows("secret/a/x", "read")


def test_leading_slash_in_request_path_is_ignored() -> None:
    assert acl(rule("secret/foo", "read")).allows("/secret/foo", "read")


# --- segment wildcards -------------------------------------------------------------------------


def test_plus_matches_exactly_one_segment() -> None:
    a = acl(rule("secret/+/config", "read"))
    assert a.allows("secret/team/config", "read")
    assert not a.allows("secret/config", "read")
    assert not a.allows("secret/a/b/config", "read")
    assert not a.allows("secret/team/config/x", "read")
    assert not a.allows("secret/team/configs", "read")


def test_plus_at_start_and_end() -> None:
    a = acl(rule("+/data/+", "read"))
    assert a.allows("kv/data/x", "read")
    assert not a.allows("kv/data/x/y", "read")
    assert not a.allows("kv/meta/x", "read")


def test_plus_with_trailing_star() -> None:
    a = acl(rule("secret/+/team*", "read"))
    assert a.allows("secret/x/team", "read")
    assert a.allows("secret/x/team-a/deep/path", "read")
    assert not a.allows("secret/x/y/team", "read")
    b = acl(rule("secret/+/*", "list"))
    assert b.allows("secret/x/", "list")
    assert b.allows("secret/x/y/z", "list")


def test_plus_inside_a_segment_is_literal() -> None:
    a = acl(rule("secret/a+b", "read"))
    assert a.allows("secret/a+b", "read")
    assert not a.allows("secret/axb", "read")


# --- priority ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("winner", "loser", "path"),
    [
        # P1 loses if its first wildcard occurs earlier.
        ("foo/a*", "foo/+", "foo/ab"),
        ("foo/bar/+/baz", "foo/+/bar/baz", "foo/bar/bar/baz"),
        ("secret/+/foo", "secret/*", "secret/x/foo"),
        # P1 loses if it ends in `*` and P2 doesn't.
        ("foo/+/bar", "foo/+/ba*", "foo/x/bar"),
        ("foo/+", "foo/*", "foo/x"),
        # P1 loses if it has more `+` segments.
        ("foo/+/bar/+", "foo/+/+/+", "foo/a/bar/c"),
        # P1 loses if it is shorter.
        ("foo/+/bar/ba*", "foo/+/bar/b*", "foo/x/bar/baz"),
        # P1 loses if it is lexicographically smaller.
        ("+/b/+", "+/+/c", "a/b/c"),
    ],
)
def test_priority(winner: str, loser: str, path: str) -> None:
    for order in [(winner, loser), (loser, winner)]:
        a = acl(*(rule(p, "read") if p == winner else rule(p, "update") for p in order))
        assert a.rule_for(path).pattern == winner  # type: ignore[union-attr]
        assert a.capabilities(path) == {"read"}


def test_prefix_and_segment_rules_compete() -> None:
    a = acl(rule("secret/*", "deny"), rule("secret/+/public", "read"))
    assert a.allows("secret/team/public", "read")
    assert not a.allows("secret/team/private", "read")


# --- deny, sudo, union -------------------------------------------------------------------------


def test_same_pattern_across_policies_is_a_union() -> None:
    a = acl(rule("secret/*", "read"), rule("secret/*", "list", "sudo"))
    assert a.capabilities("secret/x") == {"read", "list", "sudo"}


def test_deny_in_any_policy_wins_for_that_pattern() -> None:
    for texts in [
        (rule("secret/*", "read"), rule("secret/*", "deny")),
        (rule("secret/*", "deny"), rule("secret/*", "read")),
    ]:
        a = acl(*texts)
        assert a.capabilities("secret/x") == {"deny"}
        assert not a.allows("secret/x", "read")
        assert not a.allows("secret/x", "deny")
        decision = a.check("secret/x", "read")
        assert not decision.allowed
        assert "denied" in decision.reason


def test_deny_overrides_sudo() -> None:
    a = acl(rule("sys/seal", "sudo", "update"), rule("sys/seal", "deny"))
    decision = a.check("sys/seal", "update")
    assert not decision.allowed
    assert not decision.sudo


def test_sudo_is_reported() -> None:
    a = acl(rule("sys/audit/*", "sudo", "update"), rule("sys/mounts", "read"))
    decision = a.check("sys/audit/file", "update")
    assert decision.allowed and decision.sudo
    assert decision.matched == "sys/audit/*"
    assert decision.capabilities == {"sudo", "update"}
    plain = a.check("sys/mounts", "read")
    assert plain.allowed and not plain.sudo
    # sudo is reported even when the operation itself is not granted.
    refused = a.check("sys/audit/file", "delete")
    assert not refused.allowed and refused.sudo


def test_hand_built_rule_with_deny_grants_nothing() -> None:
    a = ACL([Policy("p", [PathRule("x", frozenset({"read", "deny"}))])])
    assert a.capabilities("x") == {"deny"}
    assert not a.allows("x", "read")
    assert not a.check("x", "read").allowed


def test_rule_with_no_capabilities_still_wins_and_grants_nothing() -> None:
    a = acl(rule("secret/*", "read"), 'path "secret/locked/*" {}')
    assert a.capabilities("secret/locked/x") == {"deny"}
    assert not a.allows("secret/locked/x", "read")


# --- root and builtins -------------------------------------------------------------------------


def test_root_acl_allows_everything() -> None:
    root = ACL.root()
    assert root.is_root
    assert root.capabilities("any/path") == {"root"}
    assert root.allows("sys/seal", "sudo")
    decision = root.check("sys/seal", "update", {"x": 1})
    assert decision.allowed and decision.sudo


def test_root_policy_makes_the_acl_root() -> None:
    root_policy = builtin_policy("root")
    assert root_policy is not None and root_policy.root and root_policy.rules == []
    a = ACL([parse_policy(rule("x", "deny")), root_policy])
    assert a.allows("x", "read")


def test_builtin_policies() -> None:
    default = builtin_policy("default")
    assert default is not None and default.name == "default" and not default.root
    assert default == parse_policy(DEFAULT_POLICY, name="default")
    assert builtin_policy("nope") is None


def test_default_policy_grants_token_self_service() -> None:
    a = ACL([builtin_policy("default")])  # type: ignore[list-item]
    assert a.allows("auth/token/lookup-self", "read")
    assert a.allows("auth/token/renew-self", "update")
    assert a.allows("auth/token/revoke-self", "update")
    assert a.allows("sys/capabilities-self", "update")
    assert a.allows("sys/wrapping/unwrap", "update")
    assert a.allows("sys/leases/lookup", "update")
    assert a.allows("sys/tools/hash/sha2-256", "update")
    assert a.allows("sys/internal/ui/resultant-acl", "read")
    assert a.allows("cubbyhole/mine", "create")
    assert a.allows("cubbyhole/", "list")
    assert not a.allows("secret/foo", "read")
    assert not a.allows("auth/token/create", "update")
    assert not a.allows("sys/tools/hash", "sudo")


# --- LIST and trailing slashes -----------------------------------------------------------------


def test_list_tries_path_without_trailing_slash() -> None:
    a = acl(rule("secret/foo", "list"))
    assert a.check("secret/foo/", "list").allowed
    assert a.check("secret/foo", "list").allowed
    # Only LIST gets the fallback.
    assert not a.check("secret/foo/", "read").allowed


def test_list_tries_path_with_trailing_slash() -> None:
    a = acl(rule("secret/foo/", "list"))
    assert a.check("secret/foo", "list").allowed
    assert a.check("secret/foo/", "list").allowed
    assert not a.check("secret/foo", "read").allowed


def test_list_glob_without_slash_is_tried_first() -> None:
    # `secret/foo*` covers LIST of `secret/foo/` through the bare `secret/foo`.
    a = acl(rule("secret/foo*", "list"), rule("secret/foo/*", "deny"))
    assert a.check("secret/foo/", "list").allowed
    assert not a.check("secret/foo/", "read").allowed


def test_list_on_prefix_rule_with_and_without_slash() -> None:
    a = acl(rule("secret/metadata/*", "list"))
    assert a.check("secret/metadata/", "list").allowed
    assert a.check("secret/metadata", "list").allowed
    assert a.check("secret/metadata/team/", "list").allowed


def test_capabilities_uses_list_fallbacks() -> None:
    a = acl(rule("secret/foo", "read", "list"))
    assert a.capabilities("secret/foo/") == {"read", "list"}


# --- operations --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("operation", "capability"),
    [
        ("create", "create"),
        ("read", "read"),
        ("update", "update"),
        ("patch", "patch"),
        ("delete", "delete"),
        ("list", "list"),
        ("scan", "scan"),
        ("renew", "update"),
        ("revoke", "update"),
    ],
)
def test_each_operation_needs_its_capability(operation: str, capability: str) -> None:
    assert acl(rule("x", capability)).check("x", operation).allowed
    others = {"create", "read", "update", "patch", "delete", "list", "scan"} - {capability}
    assert not acl(rule("x", *sorted(others))).check("x", operation).allowed


def test_help_is_always_allowed_and_unknown_operations_are_denied() -> None:
    a = acl(rule("x", "read"))
    assert a.check("nowhere", "help").allowed
    decision = a.check("x", "frobnicate")
    assert not decision.allowed and "unsupported operation" in decision.reason


def test_allowed_decision_reason_names_the_rule() -> None:
    decision = acl(rule("secret/*", "read")).check("secret/a", "read")
    assert decision.allowed and "secret/*" in decision.reason


# --- parameters --------------------------------------------------------------------------------

PARAMS = """
path "secret/foo" {
  capabilities = ["create", "update", "patch", "read"]
  allowed_parameters = {
    "bar"  = ["zip", "zap-*", "*-tail", "*mid*"]
    "free" = []
    "n"    = [1, true]
  }
}
"""


@pytest.mark.parametrize(
    ("params", "allowed"),
    [
        ({}, True),
        ({"bar": "zip"}, True),
        ({"BAR": "zip"}, True),
        ({"bar": "zap-1"}, True),
        ({"bar": "x-tail"}, True),
        ({"bar": "amidb"}, True),
        ({"bar": "zop"}, False),
        ({"bar": ["zip", "zap-2"]}, True),
        ({"bar": ["zip", "nope"]}, False),
        ({"free": {"any": "thing"}}, True),
        ({"n": 1}, True),
        ({"n": True}, True),
        ({"n": 2}, False),
        ({"n": "1"}, False),
        ({"other": "x"}, False),
    ],
)
def test_allowed_parameters(params: dict[str, Any], allowed: bool) -> None:
    assert acl(PARAMS).check("secret/foo", "update", params).allowed is allowed


def test_parameters_are_ignored_when_not_given_or_not_writing() -> None:
    a = acl(PARAMS)
    assert a.check("secret/foo", "update", None).allowed
    assert a.check("secret/foo", "read", {"other": "x"}).allowed


def test_decisions_made_once_still_follow_the_parameters() -> None:
    # One ACL, many requests: a decision kept from an earlier request must not answer a later
    # one whose parameters decide differently.
    a = acl(PARAMS, rule("secret/open", "update"))
    assert a.check("secret/foo", "update", {"bar": "zip"}).allowed
    assert not a.check("secret/foo", "update", {"bar": "zop"}).allowed
    assert a.check("secret/foo", "update", {"bar": "zap-1"}).allowed
    assert a.check("secret/foo", "update", None).allowed
    assert not a.check("secret/foo", "update", {"other": "x"}).allowed
    # Without parameter rules the parameters change nothing, before and after a repeat.
    for params in ({"any": "x"}, None, {"other": 1}):
        assert a.check("secret/open", "update", params).allowed
    assert not a.check("secret/open", "read").allowed


def test_capability_set_is_capabilities_on_every_path() -> None:
    a = acl(PARAMS, rule("secret/*", "list"), rule("secret/no", "deny"))
    for path in ("secret/foo", "secret/foo", "secret/bar/", "secret/no", "other"):
        assert a.capability_set(path) == frozenset(a.capabilities(path))
    assert ACL.root().capability_set("anything") == {"root"}


@pytest.mark.parametrize("operation", ["create", "update", "patch"])
def test_parameters_apply_to_every_write_operation(operation: str) -> None:
    assert not acl(PARAMS).check("secret/foo", operation, {"other": "x"}).allowed


def test_star_key_allows_any_other_parameter() -> None:
    a = acl(
        'path "x" {\n capabilities = ["update"]\n'
        ' allowed_parameters = { "*" = [], "bar" = ["ok"] }\n}'
    )
    assert a.check("x", "update", {"anything": 1}).allowed
    assert a.check("x", "update", {"bar": "ok"}).allowed
    assert not a.check("x", "update", {"bar": "no"}).allowed


def test_denied_parameters() -> None:
    a = acl(
        'path "x" {\n capabilities = ["update"]\n'
        ' denied_parameters = { "secret" = [], "mode" = ["root*"] }\n}'
    )
    assert a.check("x", "update", {"other": 1}).allowed
    assert a.check("x", "update", {"mode": "user"}).allowed
    assert not a.check("x", "update", {"secret": "x"}).allowed
    assert not a.check("x", "update", {"mode": "rootish"}).allowed
    assert not a.check("x", "update", {"mode": ["user", "root"]}).allowed


def test_denied_star_denies_any_parameter() -> None:
    a = acl('path "x" {\n capabilities = ["update"]\n denied_parameters = { "*" = [] }\n}')
    assert a.check("x", "update", {}).allowed
    decision = a.check("x", "update", {"a": 1})
    assert not decision.allowed and "denied" in decision.reason


def test_denied_beats_allowed() -> None:
    a = acl(
        'path "x" {\n capabilities = ["update"]\n'
        ' allowed_parameters = { "a" = [] }\n denied_parameters = { "a" = ["bad"] }\n}'
    )
    assert a.check("x", "update", {"a": "good"}).allowed
    assert not a.check("x", "update", {"a": "bad"}).allowed


def test_required_parameters() -> None:
    a = acl('path "x" {\n capabilities = ["create"]\n required_parameters = ["Name"]\n}')
    assert a.check("x", "create", {"name": "n"}).allowed
    decision = a.check("x", "create", {"other": 1})
    assert not decision.allowed and "missing required parameter" in decision.reason
    assert not a.check("x", "create", {}).allowed
    assert a.check("x", "create", None).allowed


def test_parameters_merge_across_policies() -> None:
    a = acl(
        'path "x" {\n capabilities = ["update"]\n allowed_parameters = { "a" = ["1"] }\n}',
        'path "x" {\n capabilities = ["update"]\n allowed_parameters = { "a" = ["2"], '
        '"b" = [] }\n required_parameters = ["b"]\n}',
        'path "x" {\n capabilities = ["update"]\n denied_parameters = { "c" = [] }\n}',
    )
    merged = a.rule_for("x")
    assert merged is not None
    assert merged.allowed_parameters == {"a": ["1", "2"], "b": []}
    assert merged.denied_parameters == {"c": []}
    assert merged.required_parameters == ["b"]
    assert a.check("x", "update", {"a": "2", "b": 0}).allowed
    assert not a.check("x", "update", {"a": "3", "b": 0}).allowed
    assert not a.check("x", "update", {"a": "1"}).allowed


def test_empty_value_list_absorbs_others_when_merging() -> None:
    a = acl(
        'path "x" { allowed_parameters = { "a" = ["1"] } }',
        'path "x" { allowed_parameters = { "a" = [] } }',
    )
    assert a.rule_for("x").allowed_parameters == {"a": []}  # type: ignore[union-attr]


# --- wrapping TTLs -----------------------------------------------------------------------------


def test_wrapping_ttls_merge_to_the_tighter_bound() -> None:
    a = acl(
        'path "x" {\n capabilities = ["read"]\n'
        ' min_wrapping_ttl = "1m"\n max_wrapping_ttl = "1h"\n}',
        'path "x" {\n min_wrapping_ttl = "30s"\n max_wrapping_ttl = "10m"\n}',
    )
    decision = a.check("x", "read")
    assert (decision.min_wrapping_ttl, decision.max_wrapping_ttl) == (30, 600)


@pytest.mark.parametrize(
    ("low", "high", "ttl", "ok"),
    [
        (0, 0, None, True),
        (0, 0, 5, True),
        (0, 600, None, False),
        (0, 600, 600, True),
        (0, 600, 601, False),
        (60, 0, None, False),
        (60, 0, 59, False),
        (60, 0, 60, True),
        (700, 600, 650, False),
    ],
)
def test_wrap_ttl_ok(low: int, high: int, ttl: int | None, ok: bool) -> None:
    decision = Decision(True, False, "", min_wrapping_ttl=low, max_wrapping_ttl=high)
    assert decision.wrap_ttl_ok(ttl) is ok


# --- lookup structure against a brute-force reference ------------------------------------------


def _reference_rule(rules: list[PathRule], path: str) -> str | None:
    """Vault's selection written the slow, obvious way: scan every rule, keep the best."""
    path = path.lstrip("/")
    patterns = {r.pattern for r in rules}
    if path in patterns:
        return path
    best: tuple[tuple[int, bool, int, int, str], str] | None = None
    parts = path.split("/")
    for pattern in patterns:
        stem = pattern.removesuffix("*")
        prefix = pattern.endswith("*")
        if pattern == stem and "+" not in stem.split("/"):
            continue  # exact rules were handled above
        segs = stem.split("/")
        if len(parts) < len(segs) or (not prefix and len(parts) != len(segs)):
            continue
        ok = all(
            s == "+" or s == parts[i] or (prefix and i == len(segs) - 1 and parts[i].startswith(s))
            for i, s in enumerate(segs)
        )
        if not ok:
            continue
        first = sum(len(s) + 1 for s in segs[: segs.index("+")]) if "+" in segs else len(stem)
        key = (first, not prefix, -segs.count("+"), len(stem), stem)
        if best is None or key > best[0]:
            best = (key, pattern)
    return best[1] if best else None


_segment = st.sampled_from(["a", "b", "ab", "+", ""])
_pattern = st.builds(
    lambda segs, star: "/".join(segs) + ("*" if star else ""),
    st.lists(_segment, min_size=1, max_size=4),
    st.booleans(),
)
_path = st.lists(st.sampled_from(["a", "b", "ab", "abc", ""]), min_size=1, max_size=5).map("/".join)


@settings(max_examples=400, deadline=None)
@given(st.lists(_pattern, min_size=1, max_size=12), st.lists(_path, min_size=1, max_size=8))
def test_lookup_matches_brute_force_reference(patterns: list[str], paths: list[str]) -> None:
    rules = [PathRule(p, frozenset({"read"})) for p in patterns]
    a = ACL([Policy("fuzz", rules)])
    for path in paths:
        got = a.rule_for(path)
        assert (got.pattern if got else None) == _reference_rule(rules, path)


def test_many_rules_stay_correct() -> None:
    rules = [PathRule(f"kv/team{i}/*", frozenset({"read"})) for i in range(2000)]
    rules += [PathRule(f"kv/team{i}/+/admin", frozenset({"deny"})) for i in range(0, 2000, 7)]
    rules.append(PathRule("kv/*", frozenset({"list"})))
    a = ACL([Policy("big", rules)])
    assert a.allows("kv/team1999/x", "read")
    assert a.capabilities("kv/team7/x/admin") == {"deny"}
    assert a.capabilities("kv/team8/x/admin") == {"read"}
    assert a.capabilities("kv/nobody") == {"list"}
