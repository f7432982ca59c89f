"""Deployment pause/resume and manual allocation health (/v1/deployment/pause/:id,
/v1/deployment/allocation-health/:id), as Nomad answers them."""

from __future__ import annotations

import uuid
from typing import Any

from services.scheduler.api.context import ApiContext
from services.scheduler.api.http import HttpError, Request, bad, ok
from services.scheduler.state.fsm import new_eval

ACTIVE = ("running", "paused", "pending", "initializing", "blocked")


def _deployment(ctx: ApiContext, dep_id: str) -> dict[str, Any]:
    dep = ctx.t.deployments.get(dep_id)
    if dep is None:
        raise HttpError(404, "deployment not found")
    return dep


def _body(req: Request) -> dict[str, Any]:
    data = req.json() or {}
    if not isinstance(data, dict):
        raise bad("Failed to decode request body: expected a JSON object")
    return data


async def _eval_for(ctx: ApiContext, dep: dict[str, Any]) -> tuple[str, int]:
    job = ctx.t.jobs.get(f"{dep['Namespace']}\x00{dep['JobID']}")
    if job is None:
        return "", 0
    ev = new_eval(str(uuid.uuid4()), job, "deployment-watcher", deployment_id=dep["ID"])
    index, _ = await ctx.append("eval.upsert", {"evals": [ev]})
    return ev["ID"], index


async def pause(ctx: ApiContext, req: Request, dep_id: str) -> Any:
    dep = _deployment(ctx, dep_id)
    ctx.require_ns(req, dep["Namespace"], "submit-job")
    data = _body(req)
    want = data.get("Pause")
    if not isinstance(want, bool):
        raise bad("Pause must be true or false")
    if dep["Status"] not in ACTIVE:
        raise bad(f"can't {'pause' if want else 'resume'} terminal deployment")
    status, desc = (
        ("paused", "Deployment is paused") if want else ("running", "Deployment is running")
    )
    index, _ = await ctx.append(
        "deployment.status", {"id": dep_id, "status": status, "description": desc}
    )
    eval_id, eval_index = ("", 0) if want else await _eval_for(ctx, dep)
    return ok(
        {
            "EvalID": eval_id,
            "EvalCreateIndex": eval_index,
            "DeploymentModifyIndex": index,
            "Index": max(index, eval_index),
        },
        index=max(index, eval_index),
    )


async def allocation_health(ctx: ApiContext, req: Request, dep_id: str) -> Any:
    dep = _deployment(ctx, dep_id)
    ctx.require_ns(req, dep["Namespace"], "submit-job")
    data = _body(req)
    healthy = data.get("HealthyAllocationIDs") or []
    unhealthy = data.get("UnhealthyAllocationIDs") or []
    if not isinstance(healthy, list) or not isinstance(unhealthy, list):
        raise bad("HealthyAllocationIDs and UnhealthyAllocationIDs must be lists")
    if dep["Status"] != "running":
        raise bad("can't set health of allocations for a terminal deployment")
    if not healthy and not unhealthy:
        raise bad("must specify at least one healthy/unhealthy allocation ID")
    updates, nodes = [], set()
    for ids, verdict in ((healthy, True), (unhealthy, False)):
        for aid in ids:
            a = ctx.t.allocs.get(aid) if isinstance(aid, str) else None
            if a is None or a.get("DeploymentID") != dep_id:
                raise bad(f"Allocation {aid} is not part of deployment")
            updates.append({"ID": aid, "DeploymentStatus": {"Healthy": verdict}})
            nodes.add(a["NodeID"])
    index, _ = await ctx.append(
        "alloc.client_update", {"updates": updates, "node_ids": sorted(nodes)}
    )
    return ok(
        {"EvalID": "", "EvalCreateIndex": 0, "DeploymentModifyIndex": index, "Index": index},
        index=index,
    )
