"""Log entries of a job's day two: scaling, allocation transitions (stop/migrate), node drain
and garbage collection. Each is applied deterministically from its payload, like fsm.py."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from services.scheduler.state.tables import jkey
from shared.replog import ApplyError, LogEntry

if TYPE_CHECKING:
    from services.scheduler.state.fsm import SchedulerFSM

MAX_SCALING_EVENTS = 20  # Nomad keeps the newest 20 per group (JobTrackedScalingEvents)


def ns_time(entry: LogEntry) -> int:
    return int(entry.time * 1e9)


def job_scale(fsm: SchedulerFSM, index: int, entry: LogEntry, p: dict[str, Any]) -> Any:
    """A count change makes a new job version (and an eval); every call records an event."""
    t = fsm.t
    key = jkey(p["namespace"], p["job_id"])
    job = t.jobs.get(key)
    if job is None:
        raise ApplyError(404, f'job "{p["job_id"]}" not found')
    group = p["group"]
    if not any(g["Name"] == group for g in job.get("TaskGroups") or []):
        raise ApplyError(400, f'task group "{group}" specified for scaling not found in job')
    count = p.get("count")
    out: dict[str, Any] = {"EvalID": "", "EvalCreateIndex": 0}
    prev = next(g["Count"] for g in job["TaskGroups"] if g["Name"] == group)
    if count is not None and count != prev:
        new = copy.deepcopy(job)
        for g in new["TaskGroups"]:
            if g["Name"] == group:
                g["Count"] = count
        new["ModifyIndex"] = new["JobModifyIndex"] = index
        new["Version"] = job["Version"] + 1
        new["Stable"] = False
        new["SubmitTime"] = ns_time(entry)
        t.jobs[key] = new
        fsm._store_version(key, new)
        fsm._bump(index, "jobs", "job_version", "job_summary")
        fsm._touched.add(key)
        job = new
    if p.get("eval") and count is not None:
        ev = {**p["eval"], "JobModifyIndex": job["JobModifyIndex"]}
        fsm._put_eval(index, entry, ev)
        out = {"EvalID": ev["ID"], "EvalCreateIndex": index}
    event = {
        "Count": count,
        "PreviousCount": prev,
        "Message": p.get("message", ""),
        "Error": bool(p.get("error")),
        "Meta": p.get("meta"),
        "Time": ns_time(entry),
        "EvalID": out["EvalID"] or None,
        "CreateIndex": index,
    }
    groups = t.scaling_events.setdefault(key, {})
    groups[group] = [*groups.get(group, []), event][-MAX_SCALING_EVENTS:]
    fsm._bump(index, "scaling_event")
    return {**out, "JobModifyIndex": job["JobModifyIndex"]}


def alloc_transition(fsm: SchedulerFSM, index: int, entry: LogEntry, p: dict[str, Any]) -> Any:
    """Mark allocations to migrate (the scheduler stops and replaces them) or stop them outright,
    with an eval per job so the scheduler acts."""
    t = fsm.t
    now = ns_time(entry)
    jobs: set[str] = set()
    for alloc_id in p["ids"]:
        old = t.allocs.get(alloc_id)
        if old is None:
            if p.get("strict"):
                raise ApplyError(404, "alloc not found")
            continue
        a = dict(old)
        if p.get("stop"):
            a["DesiredStatus"] = "stop"
            a["DesiredDescription"] = p.get("description", "alloc was stopped")
        else:
            a["DesiredTransition"] = {**(old.get("DesiredTransition") or {}), "Migrate": True}
        a["ModifyIndex"] = a["AllocModifyIndex"] = index
        a["ModifyTime"] = now
        t.put_alloc(a)
        jobs.add(jkey(a["Namespace"], a["JobID"]))
    fsm._bump(index, "allocs", "job_summary")
    evals = []
    for key in sorted(jobs):
        fsm._touched.add(key)
        ev = fsm._job_eval(index, entry, key, p.get("trigger", "alloc-stop"))
        if ev is not None:
            evals.append(ev["ID"])
    return {"EvalIDs": evals, "EvalCreateIndex": index if evals else 0, "Index": index}


def node_drain(fsm: SchedulerFSM, index: int, entry: LogEntry, p: dict[str, Any]) -> Any:
    t = fsm.t
    old = t.nodes.get(p["node_id"])
    if old is None:
        raise ApplyError(404, "node not found")
    node = dict(old)
    strategy = p.get("strategy")
    if strategy is not None:
        node["DrainStrategy"] = {**strategy, "StartedAt": ns_time(entry)}
        node["Drain"] = True
        node["SchedulingEligibility"] = "ineligible"
        node["LastDrain"] = {
            "StartedAt": ns_time(entry),
            "UpdatedAt": ns_time(entry),
            "Status": "draining",
            "Meta": p.get("meta"),
        }
    else:
        node["DrainStrategy"] = None
        node["Drain"] = False
        if node.get("LastDrain"):
            node["LastDrain"] = {
                **node["LastDrain"],
                "Status": "complete" if p.get("complete") else "canceled",
                "UpdatedAt": ns_time(entry),
            }
        if p.get("mark_eligible"):
            node["SchedulingEligibility"] = "eligible"
    node["ModifyIndex"] = index
    t.nodes[p["node_id"]] = node
    fsm._bump(index, "nodes")
    if (
        node["SchedulingEligibility"] == "eligible"
        and old.get("SchedulingEligibility") != "eligible"
    ):
        fsm._node_ready_effects(index, entry, p["node_id"])
    return {"NodeModifyIndex": index, "EvalIDs": None, "EvalCreateIndex": 0, "Index": index}


def gc_apply(fsm: SchedulerFSM, index: int, entry: LogEntry, p: dict[str, Any]) -> Any:
    t = fsm.t
    for alloc_id in p.get("allocs", []):
        t.drop_alloc(alloc_id)
    for eval_id in p.get("evals", []):
        t.drop_eval(eval_id)
    for dep_id in p.get("deployments", []):
        t.drop_deployment(dep_id)
    for key in p.get("jobs", []):
        job = t.jobs.get(key)
        # Only what is still collectable at apply time: a job re-registered since is kept.
        if job is None or job.get("Stop") or job.get("Status") == "dead":
            t.drop_job(key)
    fsm._bump(index, "jobs", "evals", "allocs", "deployment", "job_summary", "job_version")
    return {
        "index": index,
        "jobs": len(p.get("jobs", [])),
        "evals": len(p.get("evals", [])),
        "allocs": len(p.get("allocs", [])),
        "deployments": len(p.get("deployments", [])),
    }


def periodic_launch(fsm: SchedulerFSM, index: int, entry: LogEntry, p: dict[str, Any]) -> Any:
    fsm.t.periodic_launch[p["key"]] = int(p["time"])
    fsm._bump(index, "periodic_launch")
    return {"index": index}
