"""Job endpoints: list, register, parse, read, submission, versions, allocations,
evaluations, deployments, summary, deregister, stable, evaluate."""

from __future__ import annotations

import uuid
from typing import Any

from services.scheduler.admit import ValidationError, admit
from services.scheduler.api.context import ApiContext
from services.scheduler.api.http import HttpError, Request, bad, ok
from services.scheduler.api.query import answer_ok, blocking, parse_options
from services.scheduler.api.render import alloc_stub, job_stub, public
from services.scheduler.bexpr import FilterEvalError
from services.scheduler.diff import job_diff
from services.scheduler.jobspec.canonicalize import canonicalize
from services.scheduler.jobspec.parse import JobParseError, parse_job
from services.scheduler.state.fsm import new_eval
from services.scheduler.state.tables import jkey

MAX_SOURCE = 1024 * 1024  # job_max_source_size


def _filtered(opts: Any, items: list[dict[str, Any]], datum: Any = None) -> list[Any]:
    if opts.filter is None:
        return items
    out = []
    for item in items:
        try:
            if opts.filter.matches(datum(item) if datum else item):
                out.append(item)
        except FilterEvalError as exc:
            raise bad(f"failed to read result page: {exc}") from None
    return out


async def list_jobs(ctx: ApiContext, req: Request) -> Any:
    opts = parse_options(req)
    ns = req.namespace
    acl = ctx.resolve(req)
    meta = req.flag("meta")

    def compute() -> tuple[int, Any]:
        t = ctx.t
        jobs = [
            j
            for j in t.jobs.values()
            if (ns == "*" and acl.allow_ns(j["Namespace"], "list-jobs")) or (j["Namespace"] == ns)
        ]
        jobs = [j for j in jobs if j["ID"].startswith(opts.prefix)]
        jobs.sort(key=lambda j: (j["Namespace"], j["ID"]))
        jobs = _filtered(opts, jobs, public)
        if opts.next_token:
            jobs = [j for j in jobs if f"{j['Namespace']}.{j['ID']}" >= opts.next_token]
        token = ""
        if opts.per_page and len(jobs) > opts.per_page:
            nxt = jobs[opts.per_page]
            token = f"{nxt['Namespace']}.{nxt['ID']}"
            jobs = jobs[: opts.per_page]
        index = max(t.index["jobs"], t.index["job_summary"])
        return index, ([job_stub(t, j, meta=meta) for j in jobs], token)

    if ns != "*":
        ctx.require_ns(req, ns, "list-jobs")

    def answer(index: int, result: Any) -> Any:
        body, token = result
        return ok(body, index=index, headers={"X-Sched-NextToken": token} if token else None)

    return await blocking(
        ctx.replog,
        opts,
        compute,
        answer,
        index_of=lambda: max(ctx.t.index["jobs"], ctx.t.index["job_summary"]),
    )


def _api_job(req: Request, data: Any, path_id: str = "") -> dict[str, Any]:
    if not isinstance(data, dict):
        raise bad("Job must be specified")
    job = data.get("Job")
    if not isinstance(job, dict):
        raise bad("Job must be specified")
    if job.get("ID") is None:
        raise bad("Job ID hasn't been provided")
    if path_id and job.get("ID") != path_id:
        raise bad("Job ID does not match name")
    job = {k: v for k, v in job.items() if v is not None}
    if not job.get("Namespace"):
        job["Namespace"] = req.namespace if req.namespace != "*" else "default"
    if req.q("region"):
        job.setdefault("Region", req.q("region"))
    return job


async def register(ctx: ApiContext, req: Request, path_id: str = "") -> Any:
    data = req.json()
    api_job = _api_job(req, data, path_id)
    ctx.require_ns(req, str(api_job.get("Namespace")), "submit-job")
    try:
        job = admit(api_job)
    except ValidationError as exc:
        raise bad(str(exc)) from None
    except (TypeError, AttributeError, KeyError, ValueError) as exc:
        raise bad(f"Failed to decode request body: {exc}") from None
    eval_priority = data.get("EvalPriority") or 0
    if (
        not isinstance(eval_priority, int)
        or isinstance(eval_priority, bool)
        or (eval_priority and not 1 <= eval_priority <= 100)
    ):
        raise bad("Eval priority must be between 1 and 100 inclusively")
    modify_index = data.get("JobModifyIndex") or 0
    if not isinstance(modify_index, int) or isinstance(modify_index, bool):
        raise bad("Failed to decode request body: JobModifyIndex must be an integer")
    warnings = ""
    submission = data.get("Submission")
    if isinstance(submission, dict) and submission.get("Source") is not None:
        size = len(str(submission.get("Source", ""))) + len(str(submission.get("Variables", "")))
        if size > MAX_SOURCE:
            warnings = (
                f"job submission source size of {size} exceeds maximum of {MAX_SOURCE}"
                " and will be discarded"
            )
            submission = None
        else:
            submission = {
                "Source": str(submission.get("Source", "")),
                "Format": str(submission.get("Format") or "hcl2"),
                "VariableFlags": submission.get("VariableFlags") or None,
                "Variables": str(submission.get("Variables") or ""),
            }
    else:
        submission = None
    ev = None
    if not ((job.get("Periodic") or {}).get("Enabled") or job.get("ParameterizedJob")):
        ev = new_eval(str(uuid.uuid4()), job, "job-register", priority=eval_priority)
    index, result = await ctx.append(
        "job.register",
        {
            "job": job,
            "eval": ev,
            "submission": submission,
            "enforce_index": bool(data.get("EnforceIndex")),
            "job_modify_index": modify_index,
            "preserve_counts": bool(data.get("PreserveCounts")),
        },
    )
    body = {
        **result,
        "Warnings": warnings or result.get("Warnings", ""),
        "Index": index,
        "LastContact": 0,
        "KnownLeader": True,
        "NextToken": "",
    }
    return ok(body, index=index)


async def parse(ctx: ApiContext, req: Request) -> Any:
    if req.method not in ("POST", "PUT"):
        raise HttpError(405, "Invalid method")
    ctx.require_ns(req, req.namespace, "parse-job", "submit-job")
    data = req.json()
    if not isinstance(data, dict):
        raise bad("Job spec is empty")
    hcl = data.get("JobHCL")
    if not isinstance(hcl, str) or not hcl.strip():
        raise bad("Job spec is empty")
    if data.get("HCLv1") or data.get("hclv1"):
        raise bad("Failed to parse job: HCLv1 job specifications are not supported")
    flags = data.get("VariableFlags") or None
    if flags is not None and not isinstance(flags, dict):
        raise bad("Failed to decode request body: VariableFlags must be a map of strings")
    variables = data.get("Variables") or ""
    if not isinstance(variables, str):
        raise bad("Failed to decode request body: Variables must be a string")
    try:
        parsed = parse_job(hcl, variables, {str(k): str(v) for k, v in (flags or {}).items()})
    except JobParseError as exc:
        raise bad(f"Failed to parse job: {exc}") from None
    job = canonicalize(parsed.job) if data.get("Canonicalize") else parsed.job
    return ok(job)


def _job_or_404(ctx: ApiContext, ns: str, job_id: str) -> dict[str, Any]:
    job = ctx.t.jobs.get(jkey(ns, job_id))
    if job is None:
        raise HttpError(404, "job not found")
    return job


async def read(ctx: ApiContext, req: Request, job_id: str) -> Any:
    opts = parse_options(req)
    ns = req.namespace
    ctx.require_ns(req, ns, "read-job")

    def compute() -> tuple[int, Any]:
        job = ctx.t.jobs.get(jkey(ns, job_id))
        return (job["ModifyIndex"], public(job)) if job else (ctx.t.index["jobs"], None)

    def answer(index: int, body: Any) -> Any:
        if body is None:
            raise HttpError(404, "job not found")
        return ok(body, index=index)

    return await blocking(ctx.replog, opts, compute, answer)


async def submission(ctx: ApiContext, req: Request, job_id: str) -> Any:
    opts = parse_options(req)
    ns = req.namespace
    ctx.require_ns(req, ns, "read-job")
    raw = req.q("version")
    if not raw.isdigit():
        raise bad("Unable to parse job submission version parameter")
    version = int(raw)

    def compute() -> tuple[int, Any]:
        sub = ctx.t.submissions.get(jkey(ns, job_id), {}).get(version)
        if sub is None:
            return 0, None
        return sub["JobModifyIndex"], {**sub, "JobIndex": sub["JobModifyIndex"]}

    def answer(index: int, body: Any) -> Any:
        if body is None:
            raise HttpError(404, "job source not found")
        return ok(body, index=index)

    return await blocking(ctx.replog, opts, compute, answer)


async def versions(ctx: ApiContext, req: Request, job_id: str) -> Any:
    opts = parse_options(req)
    ns = req.namespace
    ctx.require_ns(req, ns, "read-job")
    diffs = req.flag("diffs")

    def compute() -> tuple[int, Any]:
        vs = ctx.t.versions.get(jkey(ns, job_id), [])
        if not vs:
            return ctx.t.index["job_version"], None
        out = [public(v) for v in vs]
        d = None
        if diffs:
            d = [job_diff(out[i + 1], out[i], contextual=True) for i in range(len(out) - 1)]
        return vs[0]["ModifyIndex"], (out, d)

    def answer(index: int, body: Any) -> Any:
        if body is None:
            raise HttpError(404, "job versions not found")
        out, d = body
        return ok(
            {"Diffs": d, "Index": index, "KnownLeader": True, "LastContact": 0, "Versions": out},
            index=index,
        )

    return await blocking(ctx.replog, opts, compute, answer)


async def allocations(ctx: ApiContext, req: Request, job_id: str) -> Any:
    opts = parse_options(req)
    ns = req.namespace
    ctx.require_ns(req, ns, "read-job")
    include_all = req.flag("all")

    def compute() -> tuple[int, Any]:
        job = ctx.t.jobs.get(jkey(ns, job_id))
        allocs = ctx.t.job_allocs(ns, job_id)
        if not include_all and job is not None:
            allocs = [a for a in allocs if a.get("_JobCreateIndex") == job["CreateIndex"]]
        allocs.sort(key=lambda a: a["ID"])
        return ctx.t.index["allocs"], [alloc_stub(a) for a in _filtered(opts, allocs, public)]

    return await blocking(
        ctx.replog, opts, compute, answer_ok, index_of=lambda: ctx.t.index["allocs"]
    )


async def evaluations(ctx: ApiContext, req: Request, job_id: str) -> Any:
    opts = parse_options(req)
    ns = req.namespace
    ctx.require_ns(req, ns, "read-job")

    def compute() -> tuple[int, Any]:
        evs = sorted(ctx.t.job_evals(ns, job_id), key=lambda e: -e["CreateIndex"])
        return ctx.t.index["evals"], [public(e) for e in _filtered(opts, evs)]

    return await blocking(
        ctx.replog, opts, compute, answer_ok, index_of=lambda: ctx.t.index["evals"]
    )


async def deployments(ctx: ApiContext, req: Request, job_id: str) -> Any:
    opts = parse_options(req)
    ns = req.namespace
    ctx.require_ns(req, ns, "read-job")
    include_all = req.flag("all")

    def compute() -> tuple[int, Any]:
        job = ctx.t.jobs.get(jkey(ns, job_id))
        deps = ctx.t.job_deployments(ns, job_id)
        if not include_all and job is not None:
            deps = [d for d in deps if d["JobCreateIndex"] == job["CreateIndex"]]
        deps.sort(key=lambda d: -d["CreateIndex"])
        return ctx.t.index["deployment"], [public(d) for d in deps]

    return await blocking(
        ctx.replog, opts, compute, answer_ok, index_of=lambda: ctx.t.index["deployment"]
    )


async def latest_deployment(ctx: ApiContext, req: Request, job_id: str) -> Any:
    opts = parse_options(req)
    ns = req.namespace
    ctx.require_ns(req, ns, "read-job")

    def compute() -> tuple[int, Any]:
        dep = ctx.t.latest_deployment(ns, job_id)
        return ctx.t.index["deployment"], public(dep) if dep else None

    return await blocking(ctx.replog, opts, compute, answer_ok)


async def summary(ctx: ApiContext, req: Request, job_id: str) -> Any:
    opts = parse_options(req)
    ns = req.namespace
    ctx.require_ns(req, ns, "read-job")

    def compute() -> tuple[int, Any]:
        if jkey(ns, job_id) not in ctx.t.jobs:
            return ctx.t.index["job_summary"], None
        s = ctx.t.job_summary(ns, job_id)
        return max(s["ModifyIndex"], 1), s

    def answer(index: int, body: Any) -> Any:
        if body is None:
            raise HttpError(404, "job not found")
        return ok(body, index=index)

    return await blocking(ctx.replog, opts, compute, answer)


async def deregister(ctx: ApiContext, req: Request, job_id: str) -> Any:
    ns = req.namespace
    ctx.require_ns(req, ns, "submit-job")
    job = _job_or_404(ctx, ns, job_id)
    ev = new_eval(str(uuid.uuid4()), job, "job-deregister")
    index, result = await ctx.append(
        "job.deregister",
        {"namespace": ns, "job_id": job_id, "purge": req.flag("purge"), "eval": ev},
    )
    return ok({**result, "Index": index, "LastContact": 0, "KnownLeader": True}, index=index)


async def stable(ctx: ApiContext, req: Request, job_id: str) -> Any:
    ns = req.namespace
    ctx.require_ns(req, ns, "submit-job")
    data = req.json() or {}
    if not isinstance(data, dict) or not isinstance(data.get("JobVersion", 0), int):
        raise bad("Failed to decode request body: JobVersion must be an integer")
    index, _ = await ctx.append(
        "job.stable",
        {
            "namespace": ns,
            "job_id": job_id,
            "version": int(data.get("JobVersion") or 0),
            "stable": bool(data.get("Stable")),
        },
    )
    return ok({"JobModifyIndex": index, "Index": index}, index=index)


async def evaluate(ctx: ApiContext, req: Request, job_id: str) -> Any:
    ns = req.namespace
    ctx.require_ns(req, ns, "submit-job")
    job = _job_or_404(ctx, ns, job_id)
    if (job.get("Periodic") or {}).get("Enabled") or job.get("ParameterizedJob"):
        raise bad("can't evaluate periodic or parameterized job")
    ev = new_eval(str(uuid.uuid4()), job, "job-register")
    index, _ = await ctx.append("eval.upsert", {"evals": [ev]})
    return ok(
        {
            "EvalID": ev["ID"],
            "EvalCreateIndex": index,
            "JobModifyIndex": job["JobModifyIndex"],
            "Index": index,
        },
        index=index,
    )
