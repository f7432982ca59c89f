"""api.Job.Canonicalize: the defaults Nomad's api package fills in (api/jobs.go, tasks.go,
resources.go). Server-side defaults (Datacenters ["*"], NodePool "default") live in
`services.scheduler.jobs.admit`, as in Nomad."""

from __future__ import annotations

import copy
from typing import Any

S = 1_000_000_000
MIN = 60 * S
H = 60 * MIN


def default_update() -> dict[str, Any]:
    return {
        "Stagger": 30 * S,
        "MaxParallel": 1,
        "HealthCheck": "checks",
        "MinHealthyTime": 10 * S,
        "HealthyDeadline": 5 * MIN,
        "ProgressDeadline": 10 * MIN,
        "AutoRevert": False,
        "AutoPromote": False,
        "Canary": 0,
    }


def default_reschedule(job_type: str) -> dict[str, Any] | None:
    if job_type == "service":
        return {
            "Attempts": 0,
            "Interval": 0,
            "Delay": 30 * S,
            "DelayFunction": "exponential",
            "MaxDelay": H,
            "Unlimited": True,
        }
    if job_type == "batch":
        return {
            "Attempts": 1,
            "Interval": 24 * H,
            "Delay": 5 * S,
            "DelayFunction": "constant",
            "MaxDelay": 0,
            "Unlimited": False,
        }
    if job_type == "system":
        return None
    return {
        "Attempts": 0,
        "Interval": 0,
        "Delay": 0,
        "DelayFunction": "",
        "MaxDelay": 0,
        "Unlimited": False,
    }


def default_restart(job_type: str) -> dict[str, Any]:
    if job_type in ("batch", "sysbatch"):
        return {
            "Delay": 15 * S,
            "Attempts": 3,
            "Interval": 24 * H,
            "Mode": "fail",
            "RenderTemplates": False,
        }
    return {
        "Delay": 15 * S,
        "Attempts": 2,
        "Interval": 30 * MIN,
        "Mode": "fail",
        "RenderTemplates": False,
    }


def default_migrate() -> dict[str, Any]:
    return {
        "MaxParallel": 1,
        "HealthCheck": "checks",
        "MinHealthyTime": 10 * S,
        "HealthyDeadline": 5 * MIN,
    }


def _merge(base: dict[str, Any] | None, over: dict[str, Any] | None) -> dict[str, Any] | None:
    """Fields set (non-null) in `over` win over `base`."""
    if base is None and over is None:
        return None
    out = dict(base or {})
    out.update({k: v for k, v in (over or {}).items() if v is not None})
    return out


def _fill(target: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    for k, v in defaults.items():
        if target.get(k) is None:
            target[k] = v
    return target


def _weights(items: list[dict[str, Any]] | None) -> None:
    for item in items or []:
        if item.get("Weight") is None:
            item["Weight"] = 50


def _canonical_update(update: dict[str, Any] | None) -> dict[str, Any] | None:
    if update is None:
        return None
    return _fill(dict(update), default_update())


def canonicalize(job_in: dict[str, Any]) -> dict[str, Any]:
    """Return a canonicalized deep copy; nulls count as unset (python-nomad sends them)."""
    job = copy.deepcopy(job_in)
    _fill(
        job,
        {
            "ID": "",
            "ParentID": "",
            "Namespace": "default",
            "Priority": 50,
            "Stop": False,
            "Region": "global",
            "NodePool": "",
            "Type": "service",
            "AllAtOnce": False,
            "MeshToken": "",
            "SvcToken": "",
            "SvcNamespace": "",
            "SchedTokenID": "",
            "Status": "",
            "StatusDescription": "",
            "Stable": False,
            "Version": 0,
            "CreateIndex": 0,
            "ModifyIndex": 0,
            "JobModifyIndex": 0,
            "Dispatched": False,
        },
    )
    if not job.get("Name"):
        job["Name"] = job["ID"]
    jtype = job["Type"]
    if job.get("Update") is not None:
        job["Update"] = _canonical_update(job["Update"])
    elif jtype in ("service", "system"):
        job["Update"] = default_update()
    if job.get("Periodic") is not None:
        _fill(
            job["Periodic"],
            {"Enabled": True, "SpecType": "cron", "ProhibitOverlap": False, "TimeZone": "UTC"},
        )
        job["Periodic"].setdefault("Spec", "")
    if job.get("ParameterizedJob") is not None:
        _fill(job["ParameterizedJob"], {"Payload": "optional"})
    _weights(job.get("Affinities"))
    _weights(job.get("Spreads"))
    for tg in job.get("TaskGroups") or []:
        _canonical_group(job, tg)
    return job


def _canonical_group(job: dict[str, Any], tg: dict[str, Any]) -> None:
    jtype = job["Type"]
    if tg.get("Count") is None:
        scaling = tg.get("Scaling") or {}
        tg["Count"] = scaling.get("Min") if scaling.get("Min") is not None else 1
    if tg.get("Scaling") is not None:
        _fill(tg["Scaling"], {"Min": tg["Count"], "Enabled": True, "Policy": None})
    tg["EphemeralDisk"] = _fill(
        dict(tg.get("EphemeralDisk") or {}), {"Sticky": False, "Migrate": False, "SizeMB": 300}
    )
    # The group's update block overrides the job's field by field.
    if job.get("Update") is not None or tg.get("Update") is not None:
        merged = _merge(job.get("Update"), tg.get("Update"))
        tg["Update"] = _canonical_update(merged)
    resched = _merge(job.get("Reschedule"), tg.get("ReschedulePolicy"))
    default = default_reschedule(jtype)
    if default is not None:
        tg["ReschedulePolicy"] = _fill(resched or {}, default)
    elif resched is not None:
        tg["ReschedulePolicy"] = resched
    if jtype == "service":
        tg["Migrate"] = _fill(
            _merge(job.get("Migrate"), tg.get("Migrate")) or {}, default_migrate()
        )
    tg["RestartPolicy"] = _fill(dict(tg.get("RestartPolicy") or {}), default_restart(jtype))
    _weights(tg.get("Affinities"))
    _weights(tg.get("Spreads"))
    for task in tg.get("Tasks") or []:
        _canonical_task(tg, task)


def _canonical_task(tg: dict[str, Any], task: dict[str, Any]) -> None:
    res = dict(task.get("Resources") or {})
    if res.get("CPU") is None and not res.get("Cores"):
        res["CPU"] = 100
    _fill(res, {"Cores": 0, "MemoryMB": 300})
    task["Resources"] = res
    if task.get("KillTimeout") is None:
        task["KillTimeout"] = 5 * S
    task["LogConfig"] = _fill(
        dict(task.get("LogConfig") or {}), {"MaxFiles": 10, "MaxFileSizeMB": 10, "Disabled": False}
    )
    task["RestartPolicy"] = _merge(tg["RestartPolicy"], task.get("RestartPolicy"))
    _weights(task.get("Affinities"))
