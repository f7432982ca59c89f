"""A job's day two: plan, revert, scale, dispatch, periodic force, and allocation stop."""

from __future__ import annotations

import base64
import binascii
import copy
import random
import time
import uuid
from typing import Any

from services.scheduler import cron
from services.scheduler.admit import ValidationError, admit, spec_changed
from services.scheduler.annotate import annotate, desired_updates
from services.scheduler.api.context import ApiContext
from services.scheduler.api.http import HttpError, Request, bad, ok
from services.scheduler.api.jobs import _api_job, _job_or_404
from services.scheduler.api.render import public
from services.scheduler.diff import job_diff
from services.scheduler.scheduling.generic import GenericScheduler
from services.scheduler.scheduling.system import SystemScheduler
from services.scheduler.state.fsm import new_eval
from services.scheduler.state.tables import alloc_terminal, jkey

MAX_PAYLOAD = 16 * 1024  # Nomad's DispatchPayloadSizeLimit


def _meta(index: int, body: dict[str, Any]) -> Any:
    return ok({**body, "Index": index, "LastContact": 0, "KnownLeader": True}, index=index)


def _admitted(req: Request, data: Any, job_id: str) -> dict[str, Any]:
    api_job = _api_job(req, data, job_id)
    try:
        return admit(api_job)
    except ValidationError as exc:
        raise bad(str(exc)) from None
    except (TypeError, AttributeError, KeyError, ValueError) as exc:
        raise bad(f"Failed to decode request body: {exc}") from None


def _next_periodic(job: dict[str, Any], after_ns: int) -> int | None:
    p = job.get("Periodic") or {}
    if not p.get("Enabled") or job.get("Stop"):
        return None
    try:
        return cron.next_launch(str(p.get("Spec") or ""), str(p.get("TimeZone") or ""), after_ns)
    except cron.CronError:
        return None


def _rfc3339(ns: int | None) -> str:
    import datetime as dt

    if not ns:
        return "0001-01-01T00:00:00Z"
    return dt.datetime.fromtimestamp(ns / 1e9, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def plan(ctx: ApiContext, req: Request, job_id: str) -> Any:
    """Dry run: the diff against the registered job and what the scheduler would do; nothing
    is written."""
    data = req.json()
    job = _admitted(req, data, job_id)
    ctx.require_ns(req, job["Namespace"], "submit-job")
    t = ctx.t
    key = jkey(job["Namespace"], job["ID"])
    existing = t.jobs.get(key)
    candidate = copy.deepcopy(job)
    if existing is not None:
        candidate["CreateIndex"] = existing["CreateIndex"]
        changed = spec_changed(existing, candidate)
        candidate["Version"] = existing["Version"] + (1 if changed else 0)
        candidate["JobModifyIndex"] = existing["JobModifyIndex"] if not changed else 0
    else:
        candidate.update(CreateIndex=0, Version=0, JobModifyIndex=0)
    candidate.setdefault("Status", "pending")
    # A view of the state with the candidate in place of the job: the scheduler reads only.
    view = copy.copy(t)
    view.jobs = {**t.jobs, key: candidate}
    desired: dict[str, dict[str, int]] = {}
    failed: dict[str, Any] | None = None
    periodic = (job.get("Periodic") or {}).get("Enabled") or job.get("ParameterizedJob")
    if not periodic:
        ev = new_eval(str(uuid.uuid4()), candidate, "job-register")
        cls = SystemScheduler if job["Type"] in ("system", "sysbatch") else GenericScheduler
        sched = cls(
            view,
            ev,
            now=time.time_ns(),
            new_id=lambda: str(uuid.uuid4()),
            rng=random.Random(),
        )
        computed = await sched.compute()
        live = [a for a in t.job_allocs(job["Namespace"], job["ID"]) if not alloc_terminal(a)]
        groups = [g["Name"] for g in job.get("TaskGroups") or []]
        desired = desired_updates(computed.place, computed.stop, computed.update, live, groups)
        failed = {k: m.as_dict() for k, m in computed.failed.items()} or None
    body: dict[str, Any] = {
        "Annotations": {"DesiredTGUpdates": desired or None, "PreemptedAllocs": None},
        "FailedTGAllocs": failed,
        "JobModifyIndex": existing["JobModifyIndex"] if existing else 0,
        "CreatedEvals": None,
        "Diff": None,
        "NextPeriodicLaunch": _rfc3339(_next_periodic(job, time.time_ns())),
        "Warnings": "",
    }
    if isinstance(data, dict) and data.get("Diff"):
        d = job_diff(public(existing) if existing else None, public(candidate))
        body["Diff"] = annotate(d, desired)
    return _meta(t.index["jobs"], body)


async def revert(ctx: ApiContext, req: Request, job_id: str) -> Any:
    data = req.json()
    if not isinstance(data, dict):
        raise bad("Failed to decode request body: expected a JSON object")
    ns = str(data.get("Namespace") or req.namespace)
    ctx.require_ns(req, ns, "submit-job")
    version = data.get("JobVersion")
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise bad("Failed to decode request body: JobVersion must be a non-negative integer")
    job = _job_or_404(ctx, ns, job_id)
    enforce = data.get("EnforcePriorVersion")
    if enforce is not None:
        if not isinstance(enforce, int) or isinstance(enforce, bool):
            raise bad("Failed to decode request body: EnforcePriorVersion must be an integer")
        if enforce != job["Version"]:
            raise bad(f"current job has version {job['Version']}; enforcing version {enforce}")
    if version == job["Version"]:
        raise bad(f"can't revert to current version {version}")
    old = ctx.t.job_version(ns, job_id, version)
    if old is None:
        raise HttpError(404, f"job {job_id!r} in namespace {ns!r} at version {version} not found")
    reverted = {k: v for k, v in copy.deepcopy(old).items() if not k.startswith("_")}
    reverted["Stop"] = False
    ev = new_eval(str(uuid.uuid4()), reverted, "job-register")
    index, result = await ctx.append("job.register", {"job": reverted, "eval": ev})
    return _meta(index, result)


def _group_or_400(job: dict[str, Any], group: Any) -> dict[str, Any]:
    for g in job.get("TaskGroups") or []:
        if g["Name"] == group:
            return g
    raise bad(f'task group "{group}" specified for scaling not found in job')


async def scale_status(ctx: ApiContext, req: Request, job_id: str) -> Any:
    ns = req.namespace
    ctx.require_ns(req, ns, "read-job-scaling", "read-job")
    job = _job_or_404(ctx, ns, job_id)
    key = jkey(ns, job_id)
    summary = ctx.t.job_summary(ns, job_id)["Summary"]
    events = ctx.t.scaling_events.get(key, {})
    groups = {}
    for g in job.get("TaskGroups") or []:
        live = [
            a
            for a in ctx.t.job_allocs(ns, job_id)
            if a["TaskGroup"] == g["Name"] and not alloc_terminal(a)
        ]
        s = summary.get(g["Name"], {})
        groups[g["Name"]] = {
            "Desired": g["Count"],
            "Placed": len(live),
            "Running": s.get("Running", 0),
            "Healthy": sum(
                1 for a in live if (a.get("DeploymentStatus") or {}).get("Healthy") is True
            ),
            "Unhealthy": sum(
                1 for a in live if (a.get("DeploymentStatus") or {}).get("Healthy") is False
            ),
            "Events": list(reversed(events.get(g["Name"], []))) or None,
        }
    body = {
        "JobID": job_id,
        "Namespace": ns,
        "JobCreateIndex": job["CreateIndex"],
        "JobModifyIndex": job["JobModifyIndex"],
        "JobStopped": bool(job.get("Stop")),
        "TaskGroups": groups,
    }
    return ok(body, index=max(job["ModifyIndex"], ctx.t.index["scaling_event"]))


async def scale(ctx: ApiContext, req: Request, job_id: str) -> Any:
    data = req.json()
    if not isinstance(data, dict):
        raise bad("Failed to decode request body: expected a JSON object")
    ns = req.namespace
    ctx.require_ns(req, ns, "scale-job", "submit-job")
    target = data.get("Target")
    if not isinstance(target, dict) or not target.get("Group"):
        raise bad("missing task group name for scaling action")
    if target.get("Job") not in (None, job_id):
        raise bad("job ID in payload did not match URL")
    count = data.get("Count")
    if count is not None and (not isinstance(count, int) or isinstance(count, bool)):
        raise bad("Failed to decode request body: Count must be an integer")
    if count is not None and count < 0:
        raise bad("scaling action count can't be negative")
    message = data.get("Message") or ""
    if not isinstance(message, str):
        raise bad("Failed to decode request body: Message must be a string")
    meta = data.get("Meta")
    if meta is not None and not isinstance(meta, dict):
        raise bad("Failed to decode request body: Meta must be an object")
    error = bool(data.get("Error"))
    if count is None and not error and not message:
        raise bad("scaling action should not contain count if error is true")
    job = _job_or_404(ctx, ns, job_id)
    group = _group_or_400(job, target["Group"])
    if count is not None and job.get("Stop"):
        raise bad("job is stopped; scaling requires a running job")
    scaling = group.get("Scaling") or {}
    if count is not None and scaling:
        lo, hi = scaling.get("Min"), scaling.get("Max")
        if isinstance(lo, int) and count < lo:
            raise bad(f"group count was less than scaling policy minimum: {count} < {lo}")
        if isinstance(hi, int) and count > hi:
            raise bad(f"group count was greater than scaling policy maximum: {count} > {hi}")
    ev = new_eval(str(uuid.uuid4()), job, "job-scaling") if count is not None else None
    index, result = await ctx.append(
        "job.scale",
        {
            "namespace": ns,
            "job_id": job_id,
            "group": group["Name"],
            "count": count,
            "message": message,
            "error": error,
            "meta": meta,
            "eval": ev,
        },
    )
    return _meta(index, {**result, "Warnings": ""})


def _dispatch_id(parent: str) -> str:
    return f"{parent}/dispatch-{int(time.time())}-{uuid.uuid4().hex[:8]}"


def child_job(parent: dict[str, Any], child_id: str) -> dict[str, Any]:
    child = {k: v for k, v in copy.deepcopy(parent).items() if not k.startswith("_")}
    child.update(ID=child_id, Name=child_id, ParentID=parent["ID"], Status="pending")
    child.pop("Periodic", None)
    child["ParameterizedJob"] = None
    return child


async def dispatch(ctx: ApiContext, req: Request, job_id: str) -> Any:
    data = req.json() or {}
    if not isinstance(data, dict):
        raise bad("Failed to decode request body: expected a JSON object")
    ns = req.namespace
    ctx.require_ns(req, ns, "dispatch-job")
    parent = _job_or_404(ctx, ns, job_id)
    spec = parent.get("ParameterizedJob")
    if not spec:
        raise bad(f'Specified job "{job_id}" is not a parameterized job')
    if parent.get("Stop"):
        raise bad(f'Specified job "{job_id}" is stopped')
    raw = data.get("Payload") or ""
    if not isinstance(raw, str):
        raise bad("Failed to decode request body: Payload must be base64 text")
    try:
        payload = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise bad("Failed to decode request body: Payload is not valid base64") from None
    rule = spec.get("Payload") or "optional"
    if rule == "forbidden" and payload:
        raise bad("Payload is not allowed")
    if rule == "required" and not payload:
        raise bad("Payload is not provided but required")
    if len(payload) > MAX_PAYLOAD:
        raise bad(f"Payload exceeds maximum size; {len(payload)} > {MAX_PAYLOAD}")
    meta = data.get("Meta") or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise bad("Failed to decode request body: Meta must be a map of strings")
    required = list(spec.get("MetaRequired") or [])
    allowed = set(required) | set(spec.get("MetaOptional") or [])
    unpermitted = sorted(k for k in meta if k not in allowed)
    if unpermitted:
        raise bad(f"Dispatch request included unpermitted metadata keys: {unpermitted}")
    missing = sorted(k for k in required if k not in meta)
    if missing:
        raise bad(f"Dispatch did not provide required meta keys: {missing}")
    child = child_job(parent, _dispatch_id(job_id))
    child["Dispatched"] = True
    child["Payload"] = base64.b64encode(payload).decode() if payload else None
    child["Meta"] = {**(parent.get("Meta") or {}), **meta} or None
    ev = new_eval(str(uuid.uuid4()), child, "job-register")
    index, result = await ctx.append("job.register", {"job": child, "eval": ev})
    return _meta(
        index,
        {
            "DispatchedJobID": child["ID"],
            "EvalID": result["EvalID"],
            "EvalCreateIndex": result["EvalCreateIndex"],
            "JobCreateIndex": index,
        },
    )


async def launch_periodic(
    ctx: ApiContext, parent: dict[str, Any], when_ns: int, recorded_ns: int = 0
) -> Any:
    """One periodic launch: the child `<parent>/periodic-<unix seconds>` and its eval, with the
    launch time recorded in the same entry (`recorded_ns`: the time the next launch counts
    from, so launches missed while no leader ran are not all made up one by one)."""
    child = child_job(parent, f"{parent['ID']}/periodic-{when_ns // 1_000_000_000}")
    ev = new_eval(str(uuid.uuid4()), child, "periodic-job")
    launch = {"key": jkey(parent["Namespace"], parent["ID"]), "time": recorded_ns or when_ns}
    return await ctx.append("job.register", {"job": child, "eval": ev, "launch": launch})


async def periodic_force(ctx: ApiContext, req: Request, job_id: str) -> Any:
    ns = req.namespace
    ctx.require_ns(req, ns, "submit-job")
    parent = _job_or_404(ctx, ns, job_id)
    if not (parent.get("Periodic") or {}).get("Enabled"):
        raise bad(f"job {job_id!r} is not periodic")
    if parent.get("Stop"):
        raise bad(f"job {job_id!r} is stopped")
    index, result = await launch_periodic(ctx, parent, time.time_ns())
    return _meta(index, {"EvalID": result["EvalID"], "EvalCreateIndex": result["EvalCreateIndex"]})


async def alloc_stop(ctx: ApiContext, req: Request, alloc_id: str) -> Any:
    a = ctx.t.allocs.get(alloc_id)
    if a is None:
        raise HttpError(404, "alloc not found")
    ctx.require_ns(req, a["Namespace"], "alloc-lifecycle", "submit-job")
    index, result = await ctx.append(
        "alloc.transition", {"ids": [alloc_id], "trigger": "alloc-stop", "strict": True}
    )
    evals = result.get("EvalIDs") or []
    return _meta(index, {"EvalID": evals[0] if evals else ""})
