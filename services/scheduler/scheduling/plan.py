"""The plan a scheduler submits, and the allocation records it creates."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from services.scheduler.placement.placer import Metrics
from services.scheduler.placement.resources import group_ask


@dataclass
class Plan:
    namespace: str
    job_id: str
    eval_id: str
    place: list[dict[str, Any]] = field(default_factory=list)
    stop: list[dict[str, Any]] = field(default_factory=list)
    update: list[dict[str, Any]] = field(default_factory=list)
    deployment: dict[str, Any] | None = None
    failed: dict[str, Metrics] = field(default_factory=dict)
    queued: dict[str, int] = field(default_factory=dict)
    followups: list[dict[str, Any]] = field(default_factory=list)

    def empty(self) -> bool:
        return not (self.place or self.stop or self.update or self.deployment)

    def fail(self, group: str, metrics: Metrics) -> None:
        if group in self.failed:
            self.failed[group].CoalescedFailures += 1
        else:
            self.failed[group] = metrics

    def payload(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "job_id": self.job_id,
            "eval_id": self.eval_id,
            "place": self.place,
            "stop": self.stop,
            "update": self.update,
            "deployment": self.deployment,
        }


def new_alloc(
    alloc_id: str,
    job: dict[str, Any],
    tg: dict[str, Any],
    name: str,
    node: dict[str, Any],
    eval_id: str,
    metrics: Metrics,
) -> dict[str, Any]:
    ask = group_ask(tg)
    tasks = {
        t["Name"]: {
            "Cpu": {"CpuShares": int((t.get("Resources") or {}).get("CPU") or 0)},
            "Memory": {"MemoryMB": int((t.get("Resources") or {}).get("MemoryMB") or 0)},
        }
        for t in tg.get("Tasks") or []
    }
    return {
        "ID": alloc_id,
        "Namespace": job["Namespace"],
        "EvalID": eval_id,
        "Name": name,
        "NodeID": node["ID"],
        "NodeName": node.get("Name", ""),
        "JobID": job["ID"],
        "JobVersion": job["Version"],
        "JobType": job["Type"],
        "TaskGroup": tg["Name"],
        "Resources": {"CPU": ask.cpu, "MemoryMB": ask.mem, "DiskMB": ask.disk},
        "AllocatedResources": {"Tasks": tasks, "Shared": {"DiskMB": ask.disk}},
        "DesiredStatus": "run",
        "DesiredDescription": "",
        "DesiredTransition": {},
        "ClientStatus": "pending",
        "ClientDescription": "",
        "TaskStates": None,
        "DeploymentID": "",
        "DeploymentStatus": None,
        "FollowupEvalID": "",
        "PreviousAllocation": "",
        "NextAllocation": "",
        "RescheduleTracker": None,
        "Metrics": metrics.as_dict(),
        "_JobCreateIndex": job["CreateIndex"],
    }
