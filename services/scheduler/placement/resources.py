"""Resource asks and node capacity; the fit check is shared by the planner and plan apply."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class Res:
    cpu: int = 0
    mem: int = 0
    disk: int = 0

    def add(self, other: Res) -> None:
        self.cpu += other.cpu
        self.mem += other.mem
        self.disk += other.disk

    def sub(self, other: Res) -> None:
        self.cpu -= other.cpu
        self.mem -= other.mem
        self.disk -= other.disk


def group_ask(tg: dict[str, Any]) -> Res:
    r = Res(disk=int((tg.get("EphemeralDisk") or {}).get("SizeMB") or 0))
    for task in tg.get("Tasks") or []:
        tr = task.get("Resources") or {}
        r.cpu += int(tr.get("CPU") or 0)
        r.mem += int(tr.get("MemoryMB") or 0)
    return r


def alloc_res(alloc: dict[str, Any]) -> Res:
    r = alloc.get("Resources") or {}
    return Res(int(r.get("CPU") or 0), int(r.get("MemoryMB") or 0), int(r.get("DiskMB") or 0))


def node_capacity(node: dict[str, Any]) -> Res:
    """Node resources minus what the node reserves for itself."""
    nr = node.get("NodeResources") or {}
    rr = node.get("ReservedResources") or {}
    return Res(
        int((nr.get("Cpu") or {}).get("CpuShares") or 0)
        - int((rr.get("Cpu") or {}).get("CpuShares") or 0),
        int((nr.get("Memory") or {}).get("MemoryMB") or 0)
        - int((rr.get("Memory") or {}).get("MemoryMB") or 0),
        int((nr.get("Disk") or {}).get("DiskMB") or 0)
        - int((rr.get("Disk") or {}).get("DiskMB") or 0),
    )


def exhausted_dimension(capacity: Res, used: Res, ask: Res) -> str:
    """ "" if `ask` fits beside `used`, else the dimension Nomad names in DimensionExhausted."""
    if used.cpu + ask.cpu > capacity.cpu:
        return "cpu"
    if used.mem + ask.mem > capacity.mem:
        return "memory"
    if used.disk + ask.disk > capacity.disk:
        return "disk"
    return ""


def binpack_score(capacity: Res, used: Res, ask: Res) -> float:
    """ScoreFitBinPack normalized to [0, 1]: fuller nodes score higher."""
    if capacity.cpu <= 0 or capacity.mem <= 0:
        return 0.0
    free_cpu = 1 - (used.cpu + ask.cpu) / capacity.cpu
    free_mem = 1 - (used.mem + ask.mem) / capacity.mem
    total = 10**free_cpu + 10**free_mem
    score = min(max(20 - total, 0.0), 18.0)
    return score / 18.0
