"""Node feasibility: node pool, readiness, datacenter globs, constraints with Nomad's operands
and target interpolation, and task drivers (scheduler/feasible.go)."""

from __future__ import annotations

import fnmatch
import re
from functools import lru_cache
from typing import Any

from services.scheduler.placement.versions import check_version

Node = dict[str, Any]


def node_ready(node: Node) -> bool:
    return (
        node.get("Status") == "ready"
        and not node.get("Drain")
        and node.get("SchedulingEligibility", "eligible") == "eligible"
    )


def pool_matches(node: Node, pool: str) -> bool:
    return pool in ("", "all") or node.get("NodePool", "default") == pool


@lru_cache(maxsize=1024)
def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile(fnmatch.translate(pattern))


def datacenter_matches(node: Node, datacenters: list[str]) -> bool:
    dc = node.get("Datacenter", "")
    return any(_glob(p).match(dc) for p in datacenters or ["*"])


def candidate_nodes(nodes: list[Node], job: dict[str, Any]) -> list[Node]:
    """readyNodesInDCsAndPool: the nodes a job may use at all."""
    pool = job.get("NodePool") or "default"
    dcs = job.get("Datacenters") or ["*"]
    return [
        n for n in nodes if pool_matches(n, pool) and node_ready(n) and datacenter_matches(n, dcs)
    ]


def resolve_target(target: str, node: Node) -> tuple[Any, bool]:
    """resolveTarget: `${node.*}`, `${attr.*}`, `${meta.*}`, else a literal."""
    if not target.startswith("${"):
        return target, True
    inner = target[2:-1] if target.endswith("}") else target[2:]
    if inner == "node.unique.id":
        return node.get("ID", ""), True
    if inner == "node.datacenter":
        return node.get("Datacenter", ""), True
    if inner == "node.unique.name":
        return node.get("Name", ""), True
    if inner == "node.class":
        return node.get("NodeClass", ""), True
    if inner == "node.pool":
        return node.get("NodePool", "default"), True
    if inner.startswith("attr."):
        attrs = node.get("Attributes") or {}
        key = inner[5:]
        return attrs.get(key), key in attrs
    if inner.startswith("meta."):
        meta = node.get("Meta") or {}
        key = inner[5:]
        return meta.get(key), key in meta
    return None, False


def _order(op: str, lhs: Any, rhs: Any) -> bool:
    for conv in (int, float):
        try:
            a, b = conv(lhs), conv(rhs)
            break
        except (TypeError, ValueError):
            continue
    else:
        a, b = str(lhs), str(rhs)
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]


def _set(v: Any) -> set[str]:
    return {p.strip() for p in str(v).split(",") if p.strip()}


def check_constraint(operand: str, lhs: Any, rhs: Any, lfound: bool, rfound: bool) -> bool:
    if operand in ("distinct_hosts", "distinct_property"):
        return True  # enforced while ranking, with the proposed allocations
    if operand == "is_set":
        return lfound
    if operand == "is_not_set":
        return not lfound
    if operand in ("!=", "not"):
        return not (lfound and rfound and lhs == rhs)
    if not (lfound and rfound):
        return False
    if operand in ("=", "==", "is"):
        return str(lhs) == str(rhs)
    if operand in ("<", "<=", ">", ">="):
        return _order(operand, lhs, rhs)
    if operand == "version":
        return check_version(str(lhs), str(rhs))
    if operand == "semver":
        return check_version(str(lhs), str(rhs), strict=True)
    if operand == "regexp":
        try:
            return re.search(str(rhs), str(lhs)) is not None
        except re.error:
            return False
    if operand in ("set_contains", "set_contains_all"):
        return _set(rhs) <= _set(lhs)
    if operand == "set_contains_any":
        return bool(_set(rhs) & _set(lhs))
    return False


def meets(node: Node, constraint: dict[str, Any]) -> bool:
    lhs, lf = resolve_target(constraint.get("LTarget") or "", node)
    rhs, rf = resolve_target(constraint.get("RTarget") or "", node)
    return check_constraint(constraint.get("Operand") or "=", lhs, rhs, lf, rf)


def has_driver(node: Node, driver: str) -> bool:
    info = (node.get("Drivers") or {}).get(driver)
    if info is not None:
        return bool(info.get("Detected")) and bool(info.get("Healthy"))
    value = (node.get("Attributes") or {}).get(f"driver.{driver}")
    return str(value).lower() in ("1", "true")


def constraint_label(c: dict[str, Any]) -> str:
    return f"{c.get('LTarget', '')} {c.get('Operand', '=')} {c.get('RTarget', '')}".strip()


def group_constraints(job: dict[str, Any], tg: dict[str, Any]) -> list[dict[str, Any]]:
    out = list(job.get("Constraints") or []) + list(tg.get("Constraints") or [])
    for task in tg.get("Tasks") or []:
        out += task.get("Constraints") or []
    return out


def infeasible_reason(node: Node, job: dict[str, Any], tg: dict[str, Any]) -> str:
    """ "" when the node can run the group (resources aside); else what filtered it, worded as
    Nomad's AllocMetric keys."""
    for c in group_constraints(job, tg):
        if not meets(node, c):
            return constraint_label(c)
    for task in tg.get("Tasks") or []:
        if not has_driver(node, task.get("Driver", "")):
            return "missing drivers"
    return ""
