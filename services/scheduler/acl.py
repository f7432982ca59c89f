"""Nomad ACL policies: parse the HCL rules and answer "may this token do X in namespace N"."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any

import hcl2

from services.scheduler.jobspec.decode import attrs, blocks
from services.scheduler.jobspec.hclexpr import Evaluator

READ_CAPS = [
    "list-jobs",
    "parse-job",
    "read-job",
    "csi-list-volume",
    "csi-read-volume",
    "read-job-scaling",
    "list-scaling-policies",
    "read-scaling-policy",
]
WRITE_CAPS = [
    *READ_CAPS,
    "submit-job",
    "dispatch-job",
    "read-logs",
    "read-fs",
    "alloc-exec",
    "alloc-lifecycle",
    "csi-write-volume",
    "csi-mount-volume",
    "scale-job",
    "submit-recommendation",
    "list-host-volumes",
    "read-host-volume",
]
POLICY_CAPS = {
    "deny": ["deny"],
    "read": READ_CAPS,
    "write": WRITE_CAPS,
    "scale": ["list-scaling-policies", "read-scaling-policy", "read-job-scaling", "scale-job"],
}
LEVELS = ("deny", "read", "write")
VARIABLE_CAPS = {"read", "write", "list", "destroy", "deny"}
# A namespace `policy` implies variable capabilities on every path, as Nomad expands it.
VARIABLE_LEVEL_CAPS = {
    "deny": {"deny"},
    "read": {"read", "list"},
    "write": {"read", "list", "write", "destroy"},
}


class PolicyError(ValueError):
    pass


@dataclass
class Policy:
    namespaces: dict[str, set[str]] = field(default_factory=dict)
    # namespace pattern -> {variable path pattern: capabilities} (Nomad's `variables` block)
    variables: dict[str, dict[str, set[str]]] = field(default_factory=dict)
    node: str = ""
    agent: str = ""
    operator: str = ""


def parse_rules(rules: str) -> Policy:
    try:
        top = hcl2.loads(rules)
    except Exception as exc:
        raise PolicyError(f"Failed to parse ACL Policy: {str(exc).splitlines()[0]}") from None
    ev = Evaluator({})
    pol = Policy()
    for labels, body in blocks(top.get("namespace", []), ev):
        if not labels:
            raise PolicyError("Failed to parse ACL Policy: namespace needs a name")
        a = {k: ev.value(v) for k, v in attrs(body).items() if k != "variables"}
        pol.variables[labels[0]] = parse_variables(body.get("variables", []), ev)
        caps: set[str] = set()
        level = a.get("policy", "")
        if level:
            if level not in POLICY_CAPS:
                raise PolicyError(f"Invalid namespace policy: {labels[0]!r}")
            caps |= set(POLICY_CAPS[level])
            if VARIABLE_LEVEL_CAPS.get(level):
                paths = pol.variables[labels[0]]
                paths["*"] = paths.get("*", set()) | VARIABLE_LEVEL_CAPS[level]
        caps |= set(a.get("capabilities") or [])
        pol.namespaces[labels[0]] = caps
    for name in ("node", "agent", "operator"):
        for _, body in blocks(top.get(name, []), ev):
            level = ev.value(attrs(body).get("policy", '""'))
            if level not in ("", *LEVELS):
                raise PolicyError(f"Invalid {name} policy: {level!r}")
            setattr(pol, name, level)
    return pol


def parse_variables(value: Any, ev: Evaluator) -> dict[str, set[str]]:
    """`variables { path "<glob>" { capabilities = [...] } }` inside a namespace block."""
    paths: dict[str, set[str]] = {}
    for _, vbody in blocks(value, ev):
        for labels, pbody in blocks(vbody.get("path", []), ev):
            if not labels:
                raise PolicyError("Failed to parse ACL Policy: variables path needs a name")
            raw = attrs(pbody).get("capabilities")
            got = ev.value(raw) if raw is not None else []
            if not isinstance(got, list):
                raise PolicyError("Failed to parse ACL Policy: capabilities must be a list")
            caps = {str(c) for c in got}
            bad = sorted(caps - VARIABLE_CAPS)
            if bad:
                raise PolicyError(f"Invalid variable capabilities: {bad!r}")
            paths[labels[0]] = paths.get(labels[0], set()) | caps
    return paths


@dataclass
class Acl:
    management: bool = False
    policies: list[Policy] = field(default_factory=list)

    def _ns_caps(self, namespace: str) -> set[str]:
        exact: set[str] | None = None
        best: tuple[int, set[str]] | None = None
        caps: set[str] = set()
        for p in self.policies:
            for pattern, c in p.namespaces.items():
                if pattern == namespace:
                    exact = (exact or set()) | c
                elif fnmatch.fnmatchcase(namespace, pattern):
                    # The closest glob wins, as Nomad matches the most specific rule.
                    score = len(pattern.replace("*", ""))
                    if best is None or score > best[0]:
                        best = (score, set(c))
                    elif score == best[0]:
                        best[1].update(c)
        caps = exact if exact is not None else (best[1] if best else set())
        return caps

    def allow_ns(self, namespace: str, capability: str) -> bool:
        if self.management:
            return True
        caps = self._ns_caps(namespace)
        return "deny" not in caps and capability in caps

    def allow_level(self, area: str, write: bool) -> bool:
        if self.management:
            return True
        levels = [getattr(p, area) for p in self.policies]
        if "deny" in levels:
            return False
        if write:
            return "write" in levels
        return "read" in levels or "write" in levels


def acl_for(token: dict[str, Any] | None, policies: dict[str, dict[str, Any]]) -> Acl:
    if token is None:
        return Acl()
    if token.get("Type") == "management":
        return Acl(management=True)
    out = Acl()
    for name in token.get("Policies") or []:
        pol = policies.get(name)
        if pol is not None:
            try:
                out.policies.append(parse_rules(pol.get("Rules", "")))
            except PolicyError:
                continue
    return out
