"""Records as the API shows them: internal keys dropped, list stubs as Nomad builds them."""

from __future__ import annotations

from typing import Any

from services.scheduler.state.tables import Tables


def public(rec: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in rec.items() if not k.startswith("_")}


def job_stub(t: Tables, job: dict[str, Any], *, meta: bool = False) -> dict[str, Any]:
    out = {
        "ID": job["ID"],
        "ParentID": job.get("ParentID", ""),
        "Name": job["Name"],
        "Namespace": job["Namespace"],
        "Datacenters": job.get("Datacenters"),
        "NodePool": job.get("NodePool", "default"),
        "Multiregion": job.get("Multiregion"),
        "Type": job["Type"],
        "Priority": job["Priority"],
        "Periodic": bool(job.get("Periodic")),
        "ParameterizedJob": bool(job.get("ParameterizedJob")),
        "Stop": bool(job.get("Stop")),
        "Status": job.get("Status", ""),
        "StatusDescription": job.get("StatusDescription", ""),
        "JobSummary": t.job_summary(job["Namespace"], job["ID"]),
        "CreateIndex": job["CreateIndex"],
        "ModifyIndex": job["ModifyIndex"],
        "JobModifyIndex": job["JobModifyIndex"],
        "SubmitTime": job.get("SubmitTime", 0),
    }
    if meta:
        out["Meta"] = job.get("Meta")
    return out


ALLOC_STUB = (
    "ID",
    "EvalID",
    "Name",
    "Namespace",
    "NodeID",
    "NodeName",
    "JobID",
    "JobType",
    "JobVersion",
    "TaskGroup",
    "AllocatedResources",
    "DesiredStatus",
    "DesiredDescription",
    "ClientStatus",
    "ClientDescription",
    "DesiredTransition",
    "TaskStates",
    "DeploymentStatus",
    "FollowupEvalID",
    "PreviousAllocation",
    "NextAllocation",
    "RescheduleTracker",
    "PreemptedAllocations",
    "PreemptedByAllocation",
    "CreateIndex",
    "ModifyIndex",
    "CreateTime",
    "ModifyTime",
)


def alloc_stub(alloc: dict[str, Any]) -> dict[str, Any]:
    return {k: alloc.get(k) for k in ALLOC_STUB}


def alloc_full(t: Tables, alloc: dict[str, Any]) -> dict[str, Any]:
    out = public(alloc)
    job = t.job_version(alloc["Namespace"], alloc["JobID"], alloc["JobVersion"])
    if job is None:
        job = t.jobs.get(f"{alloc['Namespace']}\x00{alloc['JobID']}")
    out["Job"] = public(job) if job else None
    return out


NODE_STUB = (
    "Address",
    "ID",
    "Attributes",
    "Datacenter",
    "Name",
    "NodeClass",
    "NodePool",
    "Version",
    "Drain",
    "SchedulingEligibility",
    "Status",
    "StatusDescription",
    "Drivers",
    "NodeResources",
    "ReservedResources",
    "LastDrain",
    "CreateIndex",
    "ModifyIndex",
)


def node_stub(node: dict[str, Any], *, resources: bool = False, os: bool = False) -> dict[str, Any]:
    out = {k: node.get(k) for k in NODE_STUB}
    out["Address"] = (node.get("HTTPAddr") or "").split(":")[0]
    out["Version"] = (node.get("Attributes") or {}).get("nomad.version", "")
    if not resources:
        out.pop("NodeResources")
        out.pop("ReservedResources")
    out["Attributes"] = (
        {"os.name": (node.get("Attributes") or {}).get("os.name", "")} if os else None
    )
    return out


def node_full(node: dict[str, Any]) -> dict[str, Any]:
    out = public(node)
    out.pop("SecretID", None)
    return out
