"""Select a node for each placement, as Nomad's GenericStack does: shuffled feasible nodes,
resource fit, bin packing, job anti-affinity, reschedule penalty, affinity and spread, then the
best of the first `limit` fitting options. State is the proposed usage within one plan."""

from __future__ import annotations

import math
import random
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from services.scheduler.placement.feasible import (
    candidate_nodes,
    infeasible_reason,
    meets,
    resolve_target,
)
from services.scheduler.placement.resources import (
    Res,
    alloc_res,
    binpack_score,
    exhausted_dimension,
    group_ask,
    node_capacity,
)

TERMINAL_CLIENT = ("complete", "failed", "lost")


def alloc_terminal(alloc: dict[str, Any]) -> bool:
    """Does this allocation no longer hold resources?"""
    return (
        alloc.get("DesiredStatus") in ("stop", "evict")
        or alloc.get("ClientStatus") in TERMINAL_CLIENT
    )


@dataclass
class Metrics:
    """Nomad's AllocMetric for a failed placement."""

    NodesEvaluated: int = 0
    NodesFiltered: int = 0
    NodesInPool: int = 0
    NodesAvailable: dict[str, int] = field(default_factory=dict)
    ClassFiltered: dict[str, int] | None = None
    ConstraintFiltered: dict[str, int] | None = None
    NodesExhausted: int = 0
    ClassExhausted: dict[str, int] | None = None
    DimensionExhausted: dict[str, int] | None = None
    QuotaExhausted: list[str] | None = None
    Scores: dict[str, float] | None = None
    AllocationTime: int = 0
    CoalescedFailures: int = 0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(slots=True)
class _GroupCtx:
    feasible: list[dict[str, Any]]
    ask: Res
    limit: int
    offset: int = 0
    filtered: dict[str, int] = field(default_factory=dict)


class Placer:
    """One per evaluation: `existing` are the allocations already in state (all jobs)."""

    def __init__(
        self,
        nodes: list[dict[str, Any]],
        existing: list[dict[str, Any]],
        job: dict[str, Any],
        *,
        rng: random.Random | None = None,
    ) -> None:
        self.job = job
        self.rng = rng or random.Random()
        self.nodes = {n["ID"]: n for n in nodes}
        self.in_pool = [
            n
            for n in nodes
            if n.get("NodePool", "default") in (job.get("NodePool") or "default", "all")
        ]
        self.candidates = candidate_nodes(nodes, job)
        self.rng.shuffle(self.candidates)
        self.capacity = {n["ID"]: node_capacity(n) for n in self.candidates}
        self.available: dict[str, int] = defaultdict(int)
        for n in self.candidates:
            self.available[n.get("Datacenter", "")] += 1
        self.used: dict[str, Res] = defaultdict(Res)
        # (node, group) -> allocs of this job there, for anti-affinity and distinct_hosts
        self.collisions: dict[tuple[str, str], int] = defaultdict(int)
        self.job_on_node: dict[str, int] = defaultdict(int)
        self.spread_counts: dict[tuple[str, str, str], int] = defaultdict(int)
        self.property_counts: dict[tuple[str, str], int] = defaultdict(int)
        self._groups: dict[str, _GroupCtx] = {}
        for a in existing:
            if alloc_terminal(a):
                continue
            self._track(
                a.get("NodeID", ""),
                a.get("JobID") == job.get("ID")
                and a.get("Namespace", "default") == job.get("Namespace", "default"),
                a.get("TaskGroup", ""),
                alloc_res(a),
            )

    # -- bookkeeping

    def _track(self, node_id: str, same_job: bool, group: str, res: Res, sign: int = 1) -> None:
        if sign > 0:
            self.used[node_id].add(res)
        else:
            self.used[node_id].sub(res)
        if not same_job:
            return
        self.collisions[(node_id, group)] += sign
        self.job_on_node[node_id] += sign
        node = self.nodes.get(node_id)
        if node is None:
            return
        tg = self._tg(group)
        for s in self._spreads(tg):
            val, ok = resolve_target(s.get("Attribute", ""), node)
            if ok:
                self.spread_counts[(group, s.get("Attribute", ""), str(val))] += sign
        for c in self._distinct_properties(tg):
            val, ok = resolve_target(c.get("LTarget", ""), node)
            if ok:
                self.property_counts[(c.get("LTarget", ""), str(val))] += sign

    def release(self, alloc: dict[str, Any]) -> None:
        """An allocation this plan stops frees its resources for the placements after it."""
        self._track(alloc.get("NodeID", ""), True, alloc.get("TaskGroup", ""), alloc_res(alloc), -1)

    def _tg(self, name: str) -> dict[str, Any]:
        for tg in self.job.get("TaskGroups") or []:
            if tg.get("Name") == name:
                return tg
        return {}

    def _spreads(self, tg: dict[str, Any]) -> list[dict[str, Any]]:
        return list(self.job.get("Spreads") or []) + list(tg.get("Spreads") or [])

    def _affinities(self, tg: dict[str, Any]) -> list[dict[str, Any]]:
        out = list(self.job.get("Affinities") or []) + list(tg.get("Affinities") or [])
        for t in tg.get("Tasks") or []:
            out += t.get("Affinities") or []
        return out

    def _constraints(self, tg: dict[str, Any]) -> list[dict[str, Any]]:
        return list(self.job.get("Constraints") or []) + list(tg.get("Constraints") or [])

    def _distinct_properties(self, tg: dict[str, Any]) -> list[dict[str, Any]]:
        return [c for c in self._constraints(tg) if c.get("Operand") == "distinct_property"]

    def _group(self, tg: dict[str, Any]) -> _GroupCtx:
        ctx = self._groups.get(tg["Name"])
        if ctx is None:
            feasible: list[dict[str, Any]] = []
            filtered: dict[str, int] = defaultdict(int)
            for n in self.candidates:
                reason = infeasible_reason(n, self.job, tg)
                if reason:
                    filtered[reason] += 1
                else:
                    feasible.append(n)
            n = len(feasible)
            if self._spreads(tg) or self._affinities(tg):
                limit = max(n, 1)  # Nomad lifts the limit when spread or affinity applies
            elif self.job.get("Type") == "batch":
                limit = 2
            else:
                limit = max(2, math.ceil(math.log2(n))) if n > 1 else 2
            ctx = _GroupCtx(feasible, group_ask(tg), limit, filtered=dict(filtered))
            self._groups[tg["Name"]] = ctx
        return ctx

    # -- selection

    def _distinct_ok(self, node: dict[str, Any], tg: dict[str, Any]) -> bool:
        for c in self.job.get("Constraints") or []:
            if c.get("Operand") == "distinct_hosts" and self.job_on_node[node["ID"]] > 0:
                return False
        for c in tg.get("Constraints") or []:
            if (
                c.get("Operand") == "distinct_hosts"
                and self.collisions[(node["ID"], tg["Name"])] > 0
            ):
                return False
        for c in self._distinct_properties(tg):
            val, ok = resolve_target(c.get("LTarget", ""), node)
            if not ok:
                return False
            try:
                allowed = int(c.get("RTarget") or 1)
            except ValueError:
                allowed = 1
            if self.property_counts[(c.get("LTarget", ""), str(val))] >= allowed:
                return False
        return True

    def _score(
        self, node: dict[str, Any], tg: dict[str, Any], ask: Res, penalty: set[str]
    ) -> float:
        nid = node["ID"]
        scores = [binpack_score(self.capacity[nid], self.used[nid], ask)]
        coll = self.collisions[(nid, tg["Name"])]
        if coll > 0:
            scores.append(-(coll + 1) / max(int(tg.get("Count") or 1), 1))
        if nid in penalty:
            scores.append(-1.0)
        affs = self._affinities(tg)
        if affs:
            total = sum(abs(int(a.get("Weight") or 0)) for a in affs)
            matched = sum(int(a.get("Weight") or 0) for a in affs if meets(node, a))
            if total and matched:
                scores.append(matched / total)
        spreads = self._spreads(tg)
        if spreads:
            scores.append(self._spread_score(node, tg, spreads))
        return sum(scores) / len(scores)

    def _spread_score(
        self, node: dict[str, Any], tg: dict[str, Any], spreads: list[dict[str, Any]]
    ) -> float:
        count = max(int(tg.get("Count") or 1), 1)
        total_weight = sum(int(s.get("Weight") or 0) for s in spreads) or 1
        score = 0.0
        for s in spreads:
            attr = s.get("Attribute", "")
            weight = int(s.get("Weight") or 0)
            val, ok = resolve_target(attr, node)
            if not ok:
                score -= weight / total_weight
                continue
            used = self.spread_counts[(tg["Name"], attr, str(val))]
            targets = s.get("SpreadTarget") or []
            if targets:
                pct = next(
                    (t.get("Percent", 0) for t in targets if t.get("Value") == str(val)), None
                )
                if pct is None:
                    pct = max(0, 100 - sum(int(t.get("Percent") or 0) for t in targets))
                desired = pct / 100 * count
                boost = -1.0 if desired <= 0 else (desired - used) / desired
            else:
                # Even spread: prefer the value with the fewest allocations so far.
                values = [
                    self.spread_counts[(tg["Name"], attr, str(resolve_target(attr, n)[0]))]
                    for n in self._group(tg).feasible
                ]
                lo, hi = min(values, default=0), max(values, default=0)
                boost = (
                    1.0
                    if used <= lo and hi > lo
                    else (0.0 if hi == lo else -(used - lo) / max(hi, 1))
                )
            score += boost * weight / total_weight
        return score

    def select(
        self, tg: dict[str, Any], penalty: set[str] | None = None
    ) -> tuple[dict[str, Any] | None, Metrics]:
        """Pick a node for one allocation of `tg` and reserve its resources there."""
        ctx = self._group(tg)
        penalty = penalty or set()
        # Counted once per placer, not per placement (that was half the time on 1,000 nodes).
        m = Metrics(NodesInPool=len(self.in_pool), NodesAvailable=dict(self.available))
        m.NodesFiltered = sum(ctx.filtered.values())
        m.ConstraintFiltered = dict(ctx.filtered) or None
        best: tuple[float, dict[str, Any]] | None = None
        found = 0
        feasible = ctx.feasible
        total = len(feasible)
        dims: dict[str, int] = defaultdict(int)
        i = 0
        while i < total and found < ctx.limit:
            node = feasible[(ctx.offset + i) % total]
            i += 1
            m.NodesEvaluated += 1
            if not self._distinct_ok(node, tg):
                m.NodesFiltered += 1
                cf = m.ConstraintFiltered or {}
                cf["distinct_hosts"] = cf.get("distinct_hosts", 0) + 1
                m.ConstraintFiltered = cf
                continue
            dim = exhausted_dimension(self.capacity[node["ID"]], self.used[node["ID"]], ctx.ask)
            if dim:
                m.NodesExhausted += 1
                dims[dim] += 1
                continue
            found += 1
            score = self._score(node, tg, ctx.ask, penalty)
            if best is None or score > best[0]:
                best = (score, node)
        # Continue from here next time, as Nomad's shuffled iterator does.
        ctx.offset = (ctx.offset + i) % total if total else 0
        m.NodesEvaluated += m.NodesFiltered - m.NodesEvaluated if m.NodesEvaluated == 0 else 0
        if dims:
            m.DimensionExhausted = dict(dims)
        if best is None:
            return None, m
        node = best[1]
        m.Scores = {f"{node['ID']}.normalized-score": best[0]}
        self._track(node["ID"], True, tg["Name"], ctx.ask)
        return node, m


def fit_on(placer: Placer, node: dict[str, Any], tg: dict[str, Any]) -> tuple[bool, Metrics]:
    """System jobs: one allocation on this exact node, if it is feasible and has room."""
    ctx = placer._group(tg)
    m = Metrics(NodesInPool=len(placer.in_pool), NodesEvaluated=1)
    if node["ID"] not in placer.capacity or all(n["ID"] != node["ID"] for n in ctx.feasible):
        m.NodesFiltered = 1
        return False, m
    dim = exhausted_dimension(placer.capacity[node["ID"]], placer.used[node["ID"]], ctx.ask)
    if dim:
        m.NodesExhausted = 1
        m.DimensionExhausted = {dim: 1}
        return False, m
    placer._track(node["ID"], True, tg["Name"], ctx.ask)
    return True, m


def feasible_nodes(placer: Placer, tg: dict[str, Any]) -> list[dict[str, Any]]:
    return list(placer._group(tg).feasible)
