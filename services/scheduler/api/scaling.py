"""Scaling policies (/v1/scaling/policies, /v1/scaling/policy/:id): Nomad keeps one horizontal
policy per task group that has a `scaling` block; here they are read from the current jobs.
A policy's ID is derived from its target, so every replica and every read agree on it."""

from __future__ import annotations

import uuid
from typing import Any

from services.scheduler.api.context import PERMISSION_DENIED, ApiContext
from services.scheduler.api.http import HttpError, Request, bad, ok
from services.scheduler.api.query import blocking, parse_options

TYPES = ("horizontal", "vertical_mem", "vertical_cpu", "")


def policy_id(namespace: str, job_id: str, group: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"trellis:scaling/{namespace}/{job_id}/{group}"))


def policies(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for job in jobs:
        if job.get("Stop"):
            continue
        for tg in job.get("TaskGroups") or []:
            sc = tg.get("Scaling")
            if not sc:
                continue
            out.append(
                {
                    "ID": policy_id(job["Namespace"], job["ID"], tg["Name"]),
                    "Type": "horizontal",
                    "Target": {
                        "Namespace": job["Namespace"],
                        "Job": job["ID"],
                        "Group": tg["Name"],
                    },
                    "Policy": sc.get("Policy"),
                    "Min": sc.get("Min"),
                    "Max": sc.get("Max"),
                    "Enabled": bool(sc.get("Enabled", True)),
                    "CreateIndex": job["CreateIndex"],
                    "ModifyIndex": job["JobModifyIndex"],
                }
            )
    return out


def stub(p: dict[str, Any]) -> dict[str, Any]:
    keep = ("ID", "Type", "Target", "Enabled", "CreateIndex", "ModifyIndex")
    return {k: p[k] for k in keep}


async def list_policies(ctx: ApiContext, req: Request) -> Any:
    opts = parse_options(req)
    ns = req.namespace
    job = req.q("job")
    kind = req.q("type")
    if kind not in TYPES:
        raise bad(f'unsupported scaling policy type "{kind}"')
    acl = ctx.resolve(req)
    if ns != "*" and not (
        acl.allow_ns(ns, "list-scaling-policies") or acl.allow_ns(ns, "read-job")
    ):
        raise HttpError(403, PERMISSION_DENIED)

    def compute() -> tuple[int, Any]:
        jobs = [
            j
            for j in ctx.t.jobs.values()
            if (ns == "*" or j["Namespace"] == ns)
            and (not job or j["ID"] == job)
            and acl.allow_ns(j["Namespace"], "list-scaling-policies")
        ]
        found = [] if kind in ("vertical_mem", "vertical_cpu") else policies(jobs)
        found.sort(key=lambda p: (p["Target"]["Namespace"], p["ID"]))
        return ctx.t.index["jobs"], [stub(p) for p in found]

    return await blocking(
        ctx.replog, opts, compute, lambda i, b: ok(b, index=i), index_of=lambda: ctx.t.index["jobs"]
    )


async def read_policy(ctx: ApiContext, req: Request, ident: str) -> Any:
    opts = parse_options(req)
    acl = ctx.resolve(req)

    def compute() -> tuple[int, Any]:
        for p in policies(list(ctx.t.jobs.values())):
            if p["ID"] == ident:
                return p["ModifyIndex"], p
        return ctx.t.index["jobs"], None

    def answer(index: int, p: Any) -> Any:
        if p is None:
            raise HttpError(404, "scaling policy not found")
        if not acl.allow_ns(p["Target"]["Namespace"], "read-scaling-policy"):
            raise HttpError(403, PERMISSION_DENIED)
        return ok(p, index=index)

    return await blocking(ctx.replog, opts, compute, answer)
