"""Which variable capabilities (read, write, list, destroy) a token has at a path in a
namespace: Nomad's `variables { path "<glob>" { capabilities = [...] } }` rules, the closest
matching namespace rule and then the closest matching path rule, with `deny` winning; plus the
implicit rules of a workload (a task reads its own job's variables)."""

from __future__ import annotations

import fnmatch

from services.scheduler.acl import Acl


def _closest(name: str, patterns: list[str]) -> list[str]:
    """The exact pattern if present, else the globs matching with the most literal text."""
    if name in patterns:
        return [name]
    best: list[str] = []
    score = -1
    for p in patterns:
        if "*" in p and fnmatch.fnmatchcase(name, p):
            s = len(p.replace("*", ""))
            if s > score:
                best, score = [p], s
            elif s == score:
                best.append(p)
    return best


def variable_caps(acl: Acl, namespace: str, path: str) -> set[str]:
    if acl.management:
        return {"read", "write", "list", "destroy"}
    ns_patterns = sorted({ns for p in acl.policies for ns in p.variables})
    chosen = _closest(namespace, ns_patterns)
    merged: dict[str, set[str]] = {}
    for p in acl.policies:
        for ns in chosen:
            for spec, caps in p.variables.get(ns, {}).items():
                merged[spec] = merged.get(spec, set()) | caps
    caps: set[str] = set()
    for spec in _closest(path, list(merged)):
        caps |= merged[spec]
    return set() if "deny" in caps else caps


def allow_variable(acl: Acl, namespace: str, path: str, capability: str) -> bool:
    return capability in variable_caps(acl, namespace, path)


def workload_paths(job_id: str, group: str, task: str) -> list[str]:
    """The paths a task may read without any policy (Nomad's implicit workload policy)."""
    base = f"nomad/jobs/{job_id}"
    return ["nomad/jobs", base, f"{base}/{group}", f"{base}/{group}/{task}"]
