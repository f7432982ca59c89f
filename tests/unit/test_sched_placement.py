"""Feasibility, constraint operands, scoring and node selection."""

from __future__ import annotations

import random
from typing import Any

import pytest

from services.scheduler.admit import admit
from services.scheduler.placement.feasible import (
    candidate_nodes,
    check_constraint,
    has_driver,
    meets,
)
from services.scheduler.placement.placer import Placer
from services.scheduler.placement.resources import Res, binpack_score
from services.scheduler.placement.versions import check_version


def node(i: int, **over: Any) -> dict[str, Any]:
    n = {
        "ID": f"n{i}",
        "Name": f"node-{i}",
        "Datacenter": "dc1",
        "NodePool": "default",
        "NodeClass": "",
        "Status": "ready",
        "SchedulingEligibility": "eligible",
        "Drain": False,
        "Drivers": {"mock": {"Detected": True, "Healthy": True}},
        "Attributes": {"kernel.name": "linux", "os.version": "22.04", "cpu.numcores": "4"},
        "Meta": {"rack": f"r{i % 2}"},
        "NodeResources": {
            "Cpu": {"CpuShares": 4000},
            "Memory": {"MemoryMB": 4096},
            "Disk": {"DiskMB": 10000},
        },
        "ReservedResources": {
            "Cpu": {"CpuShares": 0},
            "Memory": {"MemoryMB": 0},
            "Disk": {"DiskMB": 0},
        },
    }
    n.update(over)
    return n


def job(count: int = 1, **over: Any) -> dict[str, Any]:
    tg = {
        "Name": "g",
        "Count": count,
        "EphemeralDisk": {"SizeMB": 100},
        "Tasks": [{"Name": "t", "Driver": "mock", "Resources": {"CPU": 1000, "MemoryMB": 1024}}],
    }
    tg.update(over.pop("tg", {}))
    j = admit({"ID": "j", "Datacenters": ["dc1"], "TaskGroups": [tg], **over})
    j["CreateIndex"] = 1
    return j


@pytest.mark.parametrize(
    ("op", "lhs", "rhs", "want"),
    [
        ("=", "a", "a", True),
        ("==", "a", "b", False),
        ("is", "1", "1", True),
        ("!=", "a", "b", True),
        ("not", "a", "a", False),
        ("<", "2", "10", True),
        (">=", "10", "9", True),
        ("<", "b", "a", False),
        ("version", "1.2.3", ">= 1.0, < 2.0", True),
        ("version", "2.1", "~> 2.0", True),
        ("semver", "1.2.3-beta", "< 1.2.3", True),
        ("semver", "1.2", ">= 1.0.0", False),
        ("regexp", "ubuntu-22", "^ubuntu", True),
        ("set_contains", "a,b,c", "a,c", True),
        ("set_contains_all", "a,b", "a,d", False),
        ("set_contains_any", "a,b", "x,b", True),
    ],
)
def test_constraint_operands(op: str, lhs: str, rhs: str, want: bool) -> None:
    assert check_constraint(op, lhs, rhs, True, True) is want


def test_targets_and_set_operands() -> None:
    n = node(1)
    assert meets(n, {"LTarget": "${attr.kernel.name}", "RTarget": "linux", "Operand": "="})
    assert meets(n, {"LTarget": "${meta.rack}", "RTarget": "r1", "Operand": "="})
    assert meets(n, {"LTarget": "${node.datacenter}", "RTarget": "dc1", "Operand": "="})
    assert meets(n, {"LTarget": "${attr.gpu}", "Operand": "is_not_set"})
    assert not meets(n, {"LTarget": "${attr.gpu}", "RTarget": "x", "Operand": "="})
    assert check_version("1.10", ">= 1.9")


def test_candidates_filter_pool_status_and_dc_globs() -> None:
    nodes = [
        node(1),
        node(2, Datacenter="us-east-1"),
        node(3, Status="down"),
        node(4, NodePool="gpu"),
        node(5, SchedulingEligibility="ineligible"),
    ]
    got = {n["ID"] for n in candidate_nodes(nodes, job(Datacenters=["dc*", "us-*"]))}
    assert got == {"n1", "n2"}
    got = {n["ID"] for n in candidate_nodes(nodes, job(NodePool="gpu", Datacenters=["*"]))}
    assert got == {"n4"}


def test_driver_detection() -> None:
    assert has_driver(node(1), "mock")
    assert not has_driver(node(1), "docker")
    assert has_driver(node(1, Drivers={}, Attributes={"driver.exec": "1"}), "exec")


def test_binpack_prefers_fuller_nodes() -> None:
    cap = Res(4000, 4096, 0)
    ask = Res(1000, 1024, 0)
    assert binpack_score(cap, Res(2000, 2048, 0), ask) > binpack_score(cap, Res(), ask)
    assert 0 <= binpack_score(cap, Res(), ask) <= 1


def test_placer_packs_and_reports_exhaustion() -> None:
    nodes = [node(i) for i in range(2)]
    p = Placer(nodes, [], job(count=9), rng=random.Random(1))
    tg = job(count=9)["TaskGroups"][0]
    placed = [p.select(tg)[0] for _ in range(8)]
    assert all(n is not None for n in placed)
    n, metrics = p.select(tg)
    assert n is None
    assert metrics.NodesExhausted == 2 and metrics.DimensionExhausted == {"cpu": 2}


def test_existing_allocations_use_capacity() -> None:
    existing = [
        {
            "ID": f"a{i}",
            "NodeID": "n0",
            "JobID": "other",
            "Namespace": "default",
            "TaskGroup": "x",
            "DesiredStatus": "run",
            "ClientStatus": "running",
            "Resources": {"CPU": 1000, "MemoryMB": 1024, "DiskMB": 0},
        }
        for i in range(4)
    ]
    p = Placer([node(0), node(1)], existing, job(), rng=random.Random(0))
    chosen, _ = p.select(job()["TaskGroups"][0])
    assert chosen is not None and chosen["ID"] == "n1"


def test_constraint_filtering_metrics() -> None:
    j = job(Constraints=[{"LTarget": "${meta.rack}", "RTarget": "r0", "Operand": "="}])
    p = Placer([node(0), node(1)], [], j, rng=random.Random(0))
    chosen, m = p.select(j["TaskGroups"][0])
    assert chosen is not None and chosen["ID"] == "n0"
    assert m.ConstraintFiltered == {"${meta.rack} = r0": 1}


def test_distinct_hosts() -> None:
    j = job(count=3, Constraints=[{"Operand": "distinct_hosts", "LTarget": "", "RTarget": ""}])
    p = Placer([node(0), node(1)], [], j, rng=random.Random(0))
    tg = j["TaskGroups"][0]
    got = [p.select(tg)[0] for _ in range(3)]
    assert {g["ID"] for g in got[:2] if g} == {"n0", "n1"} and got[2] is None


def test_affinity_and_spread() -> None:
    j = job(
        count=4,
        Affinities=[{"LTarget": "${meta.rack}", "RTarget": "r1", "Operand": "=", "Weight": 100}],
    )
    p = Placer([node(i) for i in range(4)], [], j, rng=random.Random(3))
    first, _ = p.select(j["TaskGroups"][0])
    assert first is not None and first["Meta"]["rack"] == "r1"
    s = job(
        count=4,
        tg={"Spreads": [{"Attribute": "${meta.rack}", "Weight": 100, "SpreadTarget": None}]},
    )
    p = Placer([node(i) for i in range(4)], [], s, rng=random.Random(3))
    racks = [p.select(s["TaskGroups"][0])[0]["Meta"]["rack"] for _ in range(4)]
    assert sorted(racks) == ["r0", "r0", "r1", "r1"]
