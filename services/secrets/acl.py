"""The ACL: policies combined into one lookup structure that answers "may this request run?".

Matching follows Vault's rules: an exact rule wins; otherwise the highest-priority glob rule
(`*` prefix at the end, `+` for exactly one segment) applies, and only that rule counts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import chain
from typing import Any

from services.secrets.policy import PathRule, Policy, parse_policy

# Operations whose request parameters are checked against allowed/denied/required parameters.
_PARAMETER_OPERATIONS = frozenset({"create", "update", "patch"})

# Request operations and the capability each needs; renew/revoke/rollback count as update.
_OPERATION_CAPABILITY: Mapping[str, str] = {
    "create": "create",
    "read": "read",
    "update": "update",
    "patch": "patch",
    "delete": "delete",
    "list": "list",
    "scan": "scan",
    "renew": "update",
    "revoke": "update",
    "rollback": "update",
}
_LIST_LIKE = frozenset({"list", "scan"})

DEFAULT_POLICY = """\
# Built-in "default" policy: what every non-root token may do to look after itself.

# Inspect, extend and give up the calling token.
path "auth/token/lookup-self" {
  capabilities = ["read"]
}
path "auth/token/renew-self" {
  capabilities = ["update"]
}
path "auth/token/revoke-self" {
  capabilities = ["update"]
}

# Ask which capabilities the calling token has on some paths.
path "sys/capabilities-self" {
  capabilities = ["update"]
}

# The UI asks for the caller's combined policy to decide what to show.
path "sys/internal/ui/resultant-acl" {
  capabilities = ["read"]
}

# Leases the token owns: look them up and renew them.
path "sys/leases/lookup" {
  capabilities = ["update"]
}
path "sys/leases/renew" {
  capabilities = ["update"]
}
path "sys/renew" {
  capabilities = ["update"]
}

# The per-token private store.
path "cubbyhole/*" {
  capabilities = ["create", "read", "update", "delete", "list"]
}

# Response wrapping: wrap data, inspect and open wrapping tokens.
path "sys/wrapping/wrap" {
  capabilities = ["update"]
}
path "sys/wrapping/lookup" {
  capabilities = ["update"]
}
path "sys/wrapping/unwrap" {
  capabilities = ["update"]
}

# Hashing caller-supplied data reveals nothing the server holds.
path "sys/tools/hash" {
  capabilities = ["update"]
}
path "sys/tools/hash/*" {
  capabilities = ["update"]
}
"""


def builtin_policy(name: str) -> Policy | None:
    """The built-in `default` and `root` policies; None for any other name."""
    if name == "default":
        return parse_policy(DEFAULT_POLICY, name="default")
    if name == "root":
        # Root has no document: it is a flag that short-circuits every check.
        return Policy(name="root", rules=[], root=True)
    return None


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of `ACL.check`.

    `sudo` reports whether the matched rule grants sudo (needed on root-protected paths),
    independently of `allowed`. Wrapping TTL bounds are the caller's to enforce, since only
    the caller knows whether the response will be wrapped: see `wrap_ttl_ok`.
    """

    allowed: bool
    sudo: bool
    reason: str
    min_wrapping_ttl: int = 0
    max_wrapping_ttl: int = 0
    capabilities: frozenset[str] = frozenset()
    matched: str | None = None

    def wrap_ttl_ok(self, wrap_ttl: int | None) -> bool:
        """Whether a response wrapped for `wrap_ttl` seconds (None: unwrapped) is allowed."""
        if self.max_wrapping_ttl and self.min_wrapping_ttl > self.max_wrapping_ttl:
            return False  # contradictory bounds can arise from merging policies
        if self.max_wrapping_ttl and (wrap_ttl is None or wrap_ttl > self.max_wrapping_ttl):
            return False
        return not (
            self.min_wrapping_ttl and (wrap_ttl is None or wrap_ttl < self.min_wrapping_ttl)
        )


# Immutable, so the root token's every request shares one.
_ROOT_DECISION = Decision(allowed=True, sudo=True, reason="root", matched="root")
_ROOT_CAPABILITIES = frozenset({"root"})


@dataclass(frozen=True, slots=True)
class _SegmentRule:
    """A pattern with `+` segments, split once so matching is a cheap segment walk."""

    segments: tuple[str, ...]
    is_prefix: bool
    first_wildcard: int
    wildcards: int
    stem: str  # the pattern without its trailing `*`
    rule: PathRule

    @classmethod
    def compile(cls, rule: PathRule) -> _SegmentRule:
        stem = rule.pattern.removesuffix("*")
        segments = tuple(stem.split("/"))
        index = segments.index("+")
        return cls(
            segments=segments,
            is_prefix=rule.is_prefix,
            first_wildcard=sum(len(s) + 1 for s in segments[:index]),
            wildcards=segments.count("+"),
            stem=stem,
            rule=rule,
        )

    def matches(self, parts: list[str]) -> bool:
        if len(parts) < len(self.segments):
            return False
        if not self.is_prefix and len(parts) != len(self.segments):
            return False
        last = len(self.segments) - 1
        for i, want in enumerate(self.segments):
            if want == "+" or want == parts[i]:
                continue
            if self.is_prefix and i == last and parts[i].startswith(want):
                continue
            return False
        return True


# Priority key: the largest key wins. In order: a later first wildcard, not ending in `*`,
# fewer `+` segments, a longer pattern, then the lexicographically greater pattern.
_Priority = tuple[int, bool, int, int, str]


class ACL:
    """Policies merged into exact, prefix and segment-wildcard lookup tables."""

    def __init__(self, policies: Iterable[Policy]) -> None:
        self.is_root = False
        merged: dict[str, _Merge] = {}
        for policy in policies:
            self.is_root = self.is_root or policy.root
            for rule in policy.rules:
                if rule.pattern in merged:
                    merged[rule.pattern].add(rule)
                else:
                    merged[rule.pattern] = _Merge(rule)

        self._exact: dict[str, PathRule] = {}
        self._prefix: dict[str, PathRule] = {}
        segment_rules: list[_SegmentRule] = []
        for pattern, merge in merged.items():
            rule = merge.result()
            if rule.has_segment_wildcard:
                segment_rules.append(_SegmentRule.compile(rule))
            elif rule.is_prefix:
                self._prefix[pattern.removesuffix("*")] = rule
            else:
                self._exact[pattern] = rule
        # Longest prefix first: probing each distinct length is a handful of dict lookups.
        self._prefix_lengths = sorted({len(p) for p in self._prefix}, reverse=True)
        # `+` rules are bucketed by the literal segments before their first `+`, so a lookup
        # only walks the rules whose literal head equals the head of the path.
        self._segment_rules: dict[tuple[str, ...], list[_SegmentRule]] = {}
        for seg in segment_rules:
            head = seg.segments[: seg.segments.index("+")]
            self._segment_rules.setdefault(head, []).append(seg)
        self._segment_heads = sorted({len(head) for head in self._segment_rules})
        self._decisions: dict[tuple[str, str, bool], Decision] = {}
        self._capability_sets: dict[str, frozenset[str]] = {}

    @classmethod
    def root(cls) -> ACL:
        """An ACL that allows everything, sudo included (the root token's)."""
        return cls([Policy(name="root", rules=[], root=True)])

    # --- queries ---------------------------------------------------------------------------

    def rule_for(self, path: str, operation: str = "read") -> PathRule | None:
        """The single rule that governs `path` for `operation`, or None when nothing matches."""
        path = path.lstrip("/")
        found = self._exact.get(path)
        if found is not None:
            return found
        if operation not in _LIST_LIKE:
            return self._glob(path)
        # LIST names a directory: accept it with or without the trailing slash.
        bare = path.removesuffix("/")
        found = self._exact.get(bare)
        if found is None and not path.endswith("/"):
            found = self._exact.get(path + "/")
        if found is not None:
            return found
        # Without the slash first, so `secret/foo*` can grant LIST on `secret/foo/`.
        return self._glob(bare) or self._glob(bare + "/")

    def capabilities(self, path: str) -> set[str]:
        """Capabilities on `path`, as sys/capabilities reports them.

        {"root"} for a root ACL; {"deny"} when denied or when no rule matches.
        """
        if self.is_root:
            return {"root"}
        rule = self.rule_for(path, "list")
        if rule is None or not rule.capabilities or "deny" in rule.capabilities:
            return {"deny"}
        return set(rule.capabilities)

    def grants_under(self, prefix: str) -> bool:
        """Whether any rule at or below `prefix` grants something (Vault's hasMountAccess: the
        UI and the CLI may learn a mount exists only if the token can do something in it)."""
        if self.is_root or "deny" not in self.capabilities(prefix):
            return True
        rules = [*self._exact.values(), *self._prefix.values()]
        rules += [seg.rule for segs in self._segment_rules.values() for seg in segs]
        return any(
            _reaches_below(r.pattern, prefix) and "deny" not in r.capabilities and r.capabilities
            for r in rules
        )

    def allows(self, path: str, capability: str) -> bool:
        """Whether `capability` is granted on `path` (parameters are not considered)."""
        if self.is_root:
            return True
        if capability == "deny":
            return False
        rule = self.rule_for(path, capability)
        # Merged rules holding deny hold nothing else (see _Merge), so membership is enough.
        return rule is not None and capability in rule.capabilities

    def check(self, path: str, operation: str, params: Mapping[str, Any] | None = None) -> Decision:
        """Decide one request. Parameter rules apply to create/update/patch when params given.
        An ACL never changes, so a decision that does not depend on the parameters is made
        once per path and operation."""
        if self.is_root:
            return _ROOT_DECISION
        key = (path, operation, params is None)
        decision = self._decisions.get(key)
        if decision is None:
            decision, by_params = self._check(path, operation, params)
            if not by_params:
                _remember(self._decisions, key, decision)
        return decision

    def capability_set(self, path: str) -> frozenset[str]:
        """`capabilities`, made once per path."""
        if self.is_root:
            return _ROOT_CAPABILITIES
        caps = self._capability_sets.get(path)
        if caps is None:
            caps = frozenset(self.capabilities(path))
            _remember(self._capability_sets, path, caps)
        return caps

    def _check(
        self, path: str, operation: str, params: Mapping[str, Any] | None
    ) -> tuple[Decision, bool]:
        """The decision, and whether it was read off the parameters."""
        if operation == "help":
            return Decision(allowed=True, sudo=False, reason="help is always allowed"), False
        needed = _OPERATION_CAPABILITY.get(operation)
        if needed is None:
            return Decision(
                allowed=False, sudo=False, reason=f"unsupported operation {operation!r}"
            ), False

        rule = self.rule_for(path, operation)
        if rule is None:
            return Decision(
                allowed=False, sudo=False, reason="no policy grants access to this path"
            ), False

        def decide(allowed: bool, reason: str) -> Decision:
            return Decision(
                allowed=allowed,
                sudo="sudo" in rule.capabilities,
                reason=reason,
                min_wrapping_ttl=rule.min_wrapping_ttl,
                max_wrapping_ttl=rule.max_wrapping_ttl,
                capabilities=rule.capabilities,
                matched=rule.pattern,
            )

        if "deny" in rule.capabilities:
            return decide(False, f"explicitly denied by {rule.pattern!r}"), False
        if needed not in rule.capabilities:
            return decide(False, f"{rule.pattern!r} does not grant {needed!r}"), False
        by_params = (
            operation in _PARAMETER_OPERATIONS
            and params is not None
            and bool(rule.required_parameters or rule.denied_parameters or rule.allowed_parameters)
        )
        if by_params:
            assert params is not None
            problem = _parameter_problem(rule, params)
            if problem:
                return decide(False, problem), True
        return decide(True, f"{needed!r} granted by {rule.pattern!r}"), by_params

    # --- glob matching ---------------------------------------------------------------------

    def _glob(self, path: str) -> PathRule | None:
        best: tuple[_Priority, PathRule] | None = None
        for length in self._prefix_lengths:
            if length <= len(path):
                prefix = path[:length]
                rule = self._prefix.get(prefix)
                if rule is not None:
                    best = ((length, False, 0, length, prefix), rule)
                    break
        if not self._segment_rules:
            return best[1] if best else None
        parts = path.split("/")
        heads = (tuple(parts[:n]) for n in self._segment_heads if n < len(parts))
        candidates = chain.from_iterable(self._segment_rules.get(head, ()) for head in heads)
        for seg in candidates:
            if seg.matches(parts):
                key: _Priority = (
                    seg.first_wildcard,
                    not seg.is_prefix,
                    -seg.wildcards,
                    len(seg.stem),
                    seg.stem,
                )
                if best is None or key > best[0]:
                    best = (key, seg.rule)
        return best[1] if best else None


def _reaches_below(pattern: str, prefix: str) -> bool:
    """Whether a rule's pattern can match some path at or below `prefix` (segment by segment:
    `+` matches any one segment, a trailing `*` any rest)."""
    rule = pattern.split("/")
    for i, seg in enumerate(prefix.rstrip("/").split("/")):
        if i >= len(rule):
            return False
        if rule[i].endswith("*"):
            return seg.startswith(rule[i][:-1])
        if rule[i] not in ("+", seg):
            return False
    return True


class _Merge:
    """Accumulates the rules for one pattern across policies, the way Vault merges them."""

    def __init__(self, rule: PathRule) -> None:
        self.pattern = rule.pattern
        # Normalise here too: a PathRule built by hand may carry deny next to other grants.
        self.capabilities = {"deny"} if "deny" in rule.capabilities else set(rule.capabilities)
        self.allowed = {k: list(v) for k, v in rule.allowed_parameters.items()}
        self.denied = {k: list(v) for k, v in rule.denied_parameters.items()}
        self.required = list(rule.required_parameters)
        self.min_ttl = rule.min_wrapping_ttl
        self.max_ttl = rule.max_wrapping_ttl

    def add(self, rule: PathRule) -> None:
        if "deny" in self.capabilities:
            return  # deny is final; nothing else about this pattern matters
        if "deny" in rule.capabilities:
            self.capabilities = {"deny"}
            self.allowed, self.denied = {}, {}
            return
        self.capabilities |= rule.capabilities
        # The tighter (smaller) of two set bounds wins, as in Vault.
        if rule.max_wrapping_ttl and (not self.max_ttl or rule.max_wrapping_ttl < self.max_ttl):
            self.max_ttl = rule.max_wrapping_ttl
        if rule.min_wrapping_ttl and (not self.min_ttl or rule.min_wrapping_ttl < self.min_ttl):
            self.min_ttl = rule.min_wrapping_ttl
        _merge_parameters(self.allowed, rule.allowed_parameters)
        _merge_parameters(self.denied, rule.denied_parameters)
        self.required += [p for p in rule.required_parameters if p not in self.required]

    def result(self) -> PathRule:
        return PathRule(
            pattern=self.pattern,
            capabilities=frozenset(self.capabilities),
            allowed_parameters=self.allowed,
            denied_parameters=self.denied,
            required_parameters=self.required,
            min_wrapping_ttl=self.min_ttl,
            max_wrapping_ttl=self.max_ttl,
        )


def _merge_parameters(into: dict[str, list[Any]], extra: Mapping[str, list[Any]]) -> None:
    for name, values in extra.items():
        if name in into and (not values or not into[name]):
            into[name] = []  # an empty list means "any value" and absorbs the other list
        else:
            into[name] = into.get(name, []) + list(values)


# --- parameter checks ----------------------------------------------------------------------


# Memo entries per ACL: paths come from clients, so the memos must not grow without bound.
MEMO_MAX = 4096


def _remember(memo: dict[Any, Any], key: Any, value: Any) -> None:
    if len(memo) >= MEMO_MAX:
        memo.clear()
    memo[key] = value


def _parameter_problem(rule: PathRule, params: Mapping[str, Any]) -> str | None:
    """Why the request parameters break the rule, or None when they are acceptable."""
    given = {str(k).lower(): v for k, v in params.items()}
    # Checked even without allowed/denied lists: a lone required_parameters must still bite.
    for name in rule.required_parameters:
        if name.lower() not in given:
            return f"missing required parameter {name!r}"
    if not given:
        return None

    denied = rule.denied_parameters
    if "*" in denied:
        return "all parameters are denied"
    for name, value in given.items():
        if name in denied and _value_in(value, denied[name], every=False):
            return f"parameter {name!r} has a denied value"

    allowed = rule.allowed_parameters
    if not allowed:
        return None
    any_name = "*" in allowed
    for name, value in given.items():
        if name in allowed:
            if not _value_in(value, allowed[name], every=True):
                return f"value of parameter {name!r} is not allowed"
        elif not any_name:
            return f"parameter {name!r} is not allowed"
    return None


def _value_in(value: Any, accepted: list[Any], every: bool) -> bool:
    """Whether `value` is among `accepted` ([] accepts anything).

    A list value is checked element by element: all must be accepted (allow lists,
    every=True) or any one suffices (deny lists, every=False).
    """
    if not accepted:
        return True
    if isinstance(value, list):
        hits = (any(_scalar_match(v, a) for a in accepted) for v in value)
        return all(hits) if every else any(hits)
    return any(_scalar_match(value, a) for a in accepted)


def _scalar_match(value: Any, accepted: Any) -> bool:
    if isinstance(value, str) and isinstance(accepted, str):
        return _glob_match(accepted, value)
    # bool is an int subclass in Python; keep True distinct from 1.
    if isinstance(value, bool) or isinstance(accepted, bool):
        return type(value) is type(accepted) and value == accepted
    return bool(value == accepted)


def _glob_match(glob: str, value: str) -> bool:
    """`*` alone matches anything; a leading and/or trailing `*` matches a suffix/prefix."""
    if glob == "*":
        return True
    starts, ends = glob.startswith("*"), glob.endswith("*")
    if starts and ends:
        return glob[1:-1] in value
    if starts:
        return value.endswith(glob[1:])
    if ends:
        return value.startswith(glob[:-1])
    return value == glob
