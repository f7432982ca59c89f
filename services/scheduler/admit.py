"""Server-side admission of a job: Nomad's structs.Job.Canonicalize defaults, then Validate
with Nomad's messages, and the SpecChanged comparison that decides whether a register makes a
new version."""

from __future__ import annotations

import copy
from typing import Any

from services.scheduler import cron
from services.scheduler.jobspec.canonicalize import canonicalize

JOB_TYPES = ("service", "batch", "system", "sysbatch")
DEFAULT_PRIORITY = 50
MIN_PRIORITY, MAX_PRIORITY = 1, 100
HEALTH_CHECKS = ("checks", "task_states", "manual")

# Fields that are bookkeeping, not spec: a register that only differs in these is no new version.
NON_SPEC = (
    "Status",
    "StatusDescription",
    "Stable",
    "Version",
    "CreateIndex",
    "ModifyIndex",
    "JobModifyIndex",
    "SubmitTime",
)


class ValidationError(ValueError):
    """go-multierror's text: '1 error occurred:\\n\\t* ...\\n\\n'."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        super().__init__(multierror(errors))


def multierror(errors: list[str]) -> str:
    if len(errors) == 1:
        return f"1 error occurred:\n\t* {errors[0]}\n\n"
    points = "\n\t".join(f"* {e}" for e in errors)
    return f"{len(errors)} errors occurred:\n\t{points}\n\n"


def admit(api_job: dict[str, Any]) -> dict[str, Any]:
    """api.Job -> stored job: the api canonicalizer, then the server's hooks; raises
    ValidationError. The job-level Update keeps only Stagger and MaxParallel, like
    ApiJobToStructJob."""
    job = canonicalize(api_job)
    if not job.get("Datacenters"):
        job["Datacenters"] = ["*"]
    if not job.get("NodePool"):
        job["NodePool"] = "default"
    if not job.get("Namespace"):
        job["Namespace"] = "default"
    if not job.get("Priority"):
        job["Priority"] = DEFAULT_PRIORITY
    if job.get("Update") is not None:
        u = job["Update"]
        job["Update"] = {
            "Stagger": u.get("Stagger", 0),
            "MaxParallel": u.get("MaxParallel", 0),
            "HealthCheck": "",
            "MinHealthyTime": 0,
            "HealthyDeadline": 0,
            "ProgressDeadline": 0,
            "AutoRevert": False,
            "AutoPromote": False,
            "Canary": 0,
        }
    for key in ("Constraints", "Affinities", "Spreads", "Meta"):
        job.setdefault(key, None)
    validate(job)
    return job


def _validate_update(u: dict[str, Any] | None) -> list[str]:
    if not u or not u.get("MaxParallel"):
        return []
    errs: list[str] = []
    if u.get("HealthCheck") not in HEALTH_CHECKS:
        errs.append(f'Invalid health check given: "{u.get("HealthCheck")}"')
    if u.get("MaxParallel", 0) < 0:
        errs.append(f"Max parallel can not be less than zero: {u['MaxParallel']} < 0")
    if u.get("Canary", 0) < 0:
        errs.append(f"Canary count can not be less than zero: {u['Canary']} < 0")
    if u.get("Canary", 0) == 0 and u.get("AutoPromote"):
        errs.append("Auto Promote requires a Canary count greater than zero")
    if u.get("MinHealthyTime", 0) < 0:
        errs.append(f"Minimum healthy time may not be less than zero: {u['MinHealthyTime']}")
    if u.get("HealthyDeadline", 0) <= 0:
        errs.append(f"Healthy deadline must be greater than zero: {u.get('HealthyDeadline')}")
    if u.get("ProgressDeadline", 0) < 0:
        errs.append(f"Progress deadline must be zero or greater: {u['ProgressDeadline']}")
    if u.get("MinHealthyTime", 0) >= u.get("HealthyDeadline", 0):
        errs.append(
            f"Minimum healthy time must be less than healthy deadline: "
            f"{u.get('MinHealthyTime')} > {u.get('HealthyDeadline')}"
        )
    if u.get("ProgressDeadline") and u.get("HealthyDeadline", 0) >= u["ProgressDeadline"]:
        errs.append(
            f"Healthy deadline must be less than progress deadline: "
            f"{u.get('HealthyDeadline')} > {u['ProgressDeadline']}"
        )
    return errs


def _validate_group(job: dict[str, Any], tg: dict[str, Any]) -> list[str]:
    errs: list[str] = []
    if not tg.get("Name"):
        errs.append("Missing task group name")
    count = tg.get("Count")
    if not isinstance(count, int) or isinstance(count, bool):
        errs.append("Task group count must be an integer")
    elif count < 0:
        errs.append("Task group count can't be negative")
    tasks = tg.get("Tasks") or []
    if not tasks:
        errs.append("Missing tasks for task group")
    disk = tg.get("EphemeralDisk")
    size = disk.get("SizeMB") if isinstance(disk, dict) else None
    if size is not None and (not isinstance(size, int) or isinstance(size, bool)):
        errs.append("EphemeralDisk.SizeMB must be an integer")
    errs += _validate_update(tg.get("Update"))
    seen: dict[str, int] = {}
    for i, task in enumerate(tasks):
        name = task.get("Name") or ""
        if not name:
            errs.append(f"Task {i + 1} missing name")
            continue
        if name in seen:
            errs.append(f"Task {i + 1} redefines '{name}' from task {seen[name] + 1}")
        seen[name] = i
        terrs = []
        if not task.get("Driver"):
            terrs.append("Missing task driver")
        if "/" in name:
            terrs.append(f"Task name '{name}' cannot contain slash")
        elif name in (".", "..") or "\\" in name or "\x00" in name:
            # The task's directory on the client is named after it.
            terrs.append(f"Task name '{name}' is not a valid directory name")
        res = task.get("Resources") or {}
        # Go decodes these into ints: anything else is refused at the door, not in placement.
        for key in ("CPU", "Cores", "MemoryMB", "MemoryMaxMB", "DiskMB"):
            v = res.get(key) if isinstance(res, dict) else None
            if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
                terrs.append(f"Resources.{key} must be an integer, got {type(v).__name__}")
        if not isinstance(res, dict):
            terrs.append("Resources must be an object")
        elif isinstance(res.get("MemoryMB"), int) and res["MemoryMB"] < 10:
            terrs.append(f"minimum MemoryMB value is 10; got {res['MemoryMB']}")
        if terrs:
            errs.append(f"Task {name} validation failed: {multierror(terrs)}")
    if job.get("Type") == "system" and isinstance(count, int) and count > 1:
        errs.append(
            f"Job task group {tg.get('Name')} has count {count}. Count cannot exceed 1 "
            "with system scheduler"
        )
    return errs


def _validate_periodic(p: Any, jtype: Any) -> list[str]:
    """Nomad's PeriodicConfig.Validate: a cron spec that parses, a known time zone."""
    if not isinstance(p, dict) or not p.get("Enabled"):
        return []
    if jtype not in ("batch", "sysbatch"):
        return ['Periodic can only be used with "batch" or "sysbatch" scheduler']
    if (p.get("SpecType") or "cron") != "cron":
        return [f"Unknown periodic specification type {p.get('SpecType')!r}"]
    spec = p.get("Spec")
    if not isinstance(spec, str) or not spec:
        return ["Must specify a spec"]
    try:
        cron.parse(spec)
    except cron.CronError as exc:
        return [f"Invalid periodic job: {exc}"]
    try:
        cron.zone(str(p.get("TimeZone") or ""))
    except cron.CronError as exc:
        return [str(exc)]
    return []


def validate(job: dict[str, Any]) -> None:
    errs: list[str] = []
    if not job.get("Region"):
        errs.append("Missing job region")
    jid = job.get("ID")
    if not isinstance(jid, str) or not jid:
        errs.append("Missing job ID")
    elif " " in jid:
        errs.append("Job ID contains a space")
    elif "\x00" in jid:
        errs.append("Job ID contains a null character")
    if not job.get("Name"):
        errs.append("Missing job name")
    if not job.get("Namespace"):
        errs.append("Job must be in a namespace")
    jtype = job.get("Type")
    if not jtype:
        errs.append("Missing job type")
    elif jtype not in JOB_TYPES:
        errs.append(f'Invalid job type: "{jtype}"')
    prio = job.get("Priority")
    if (
        not isinstance(prio, int)
        or isinstance(prio, bool)
        or not (MIN_PRIORITY <= prio <= MAX_PRIORITY)
    ):
        errs.append(f"Job priority must be between [{MIN_PRIORITY}, {MAX_PRIORITY}]")
    errs += _validate_periodic(job.get("Periodic"), jtype)
    dcs = job.get("Datacenters")
    if not dcs:
        errs.append("Missing job datacenters")
    elif any(not isinstance(d, str) or not d for d in dcs):
        errs.append("Job datacenter must be non-empty string")
    groups = job.get("TaskGroups") or []
    if not groups:
        errs.append("Missing job task groups")
    for i, c in enumerate(job.get("Constraints") or []):
        cerr = constraint_error(c)
        if cerr:
            errs.append(f"Constraint {i + 1} validation failed: {multierror([cerr])}")
    seen: dict[str, int] = {}
    for i, tg in enumerate(groups):
        name = tg.get("Name") or ""
        if name in seen:
            errs.append(f"Job task group {i + 1} redefines '{name}' from group {seen[name] + 1}")
        seen[name] = i
        gerrs = _validate_group(job, tg)
        if gerrs:
            errs.append(f"Task group {name} validation failed: {multierror(gerrs)}")
    periodic = job.get("Periodic")
    if periodic and periodic.get("Enabled", True):
        if jtype in ("system", "sysbatch") or jtype == "service":
            errs.append('Periodic can only be used with "batch" scheduler')
        if not periodic.get("Spec"):
            errs.append("Must specify a spec")
    if job.get("ParameterizedJob") and jtype != "batch":
        errs.append('Parameterized job can only be used with "batch" scheduler')
    if errs:
        raise ValidationError(errs)


def constraint_error(c: dict[str, Any]) -> str:
    op = c.get("Operand") or "="
    known = {
        "=",
        "==",
        "is",
        "!=",
        "not",
        "<",
        "<=",
        ">",
        ">=",
        "distinct_hosts",
        "distinct_property",
        "regexp",
        "version",
        "semver",
        "set_contains",
        "set_contains_all",
        "set_contains_any",
        "is_set",
        "is_not_set",
    }
    if op not in known:
        return f'Unknown constraint type "{op}"'
    if op in (
        "regexp",
        "version",
        "semver",
        "set_contains",
        "set_contains_all",
        "set_contains_any",
        "<",
        "<=",
        ">",
        ">=",
    ) and not c.get("RTarget"):
        return f"Operator {op!r} requires an RTarget"
    if (
        op not in ("distinct_hosts", "distinct_property", "is_set", "is_not_set")
        and not c.get("LTarget")
        and op not in ("=", "==", "is", "!=", "not")
    ):
        return "No LTarget provided but is required by constraint"
    if op == "regexp":
        import re

        try:
            re.compile(c.get("RTarget", ""))
        except re.error as exc:
            return f"Regular expression failed to compile: {exc}"
    return ""


def spec_changed(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Internal `_` keys (the summary's queued counts, scaling events) are state, not spec:
    a stored job carrying them still equals the same spec registered again."""
    a = {k: v for k, v in old.items() if k not in NON_SPEC and not k.startswith("_")}
    b = {k: v for k, v in new.items() if k not in NON_SPEC and not k.startswith("_")}
    return a != b


def strip_bookkeeping(job: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(job)
    for k in NON_SPEC:
        out.pop(k, None)
    return out
