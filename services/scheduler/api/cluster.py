"""Node, allocation, evaluation, deployment, status and agent endpoints."""

from __future__ import annotations

from typing import Any

from services.scheduler.api.context import ApiContext
from services.scheduler.api.http import HttpError, Request, bad, ok
from services.scheduler.api.jobs import _filtered
from services.scheduler.api.query import answer_ok, blocking, parse_options
from services.scheduler.api.render import alloc_full, alloc_stub, node_full, node_stub, public


def _by_prefix(table: dict[str, dict[str, Any]], ident: str, what: str) -> dict[str, Any]:
    rec = table.get(ident)
    if rec is not None:
        return rec
    matches = [v for k, v in table.items() if k.startswith(ident)] if len(ident) >= 2 else []
    if len(matches) == 1:
        return matches[0]
    raise HttpError(404, f"{what} not found")


def _ns_ok(ctx: ApiContext, req: Request, acl: Any, ns: str) -> bool:
    want = req.namespace
    return (want == "*" or ns == want) and acl.allow_ns(ns, "read-job")


async def list_nodes(ctx: ApiContext, req: Request) -> Any:
    opts = parse_options(req)
    ctx.require(req, "node", write=False)
    resources = req.flag("resources")
    os_ = req.flag("os")

    def compute() -> tuple[int, Any]:
        nodes = sorted(
            (n for n in ctx.t.nodes.values() if n["ID"].startswith(opts.prefix)),
            key=lambda n: n["ID"],
        )
        nodes = _filtered(opts, nodes, public)
        return ctx.t.index["nodes"], [node_stub(n, resources=resources, os=os_) for n in nodes]

    return await blocking(
        ctx.replog, opts, compute, answer_ok, index_of=lambda: ctx.t.index["nodes"]
    )


async def read_node(ctx: ApiContext, req: Request, node_id: str) -> Any:
    opts = parse_options(req)
    ctx.require(req, "node", write=False)

    def compute() -> tuple[int, Any]:
        try:
            n = _by_prefix(ctx.t.nodes, node_id, "node")
        except HttpError:
            return ctx.t.index["nodes"], None
        return n["ModifyIndex"], node_full(n)

    def answer(index: int, body: Any) -> Any:
        if body is None:
            raise HttpError(404, "node not found")
        return ok(body, index=index)

    return await blocking(ctx.replog, opts, compute, answer)


async def node_allocations(ctx: ApiContext, req: Request, node_id: str) -> Any:
    opts = parse_options(req)
    ctx.require(req, "node", write=False)

    def compute() -> tuple[int, Any]:
        allocs = sorted(ctx.t.node_allocs(node_id), key=lambda a: a["ID"])
        return ctx.t.index["allocs"], [alloc_full(ctx.t, a) for a in allocs]

    return await blocking(
        ctx.replog, opts, compute, answer_ok, index_of=lambda: ctx.t.index["allocs"]
    )


async def node_eligibility(ctx: ApiContext, req: Request, node_id: str) -> Any:
    ctx.require(req, "node", write=True)
    data = req.json() or {}
    elig = data.get("Eligibility") if isinstance(data, dict) else None
    if elig not in ("eligible", "ineligible"):
        raise bad(f'invalid scheduling eligibility "{elig}"')
    index, _ = await ctx.append("node.eligibility", {"node_id": node_id, "eligibility": elig})
    return ok(
        {"EvalIDs": None, "EvalCreateIndex": 0, "NodeModifyIndex": index, "Index": index},
        index=index,
    )


async def list_allocations(ctx: ApiContext, req: Request) -> Any:
    opts = parse_options(req)
    acl = ctx.resolve(req)

    def compute() -> tuple[int, Any]:
        allocs = sorted(
            (
                a
                for a in ctx.t.allocs.values()
                if a["ID"].startswith(opts.prefix) and _ns_ok(ctx, req, acl, a["Namespace"])
            ),
            key=lambda a: a["ID"],
        )
        allocs = _filtered(opts, allocs, public)
        return ctx.t.index["allocs"], [alloc_stub(a) for a in allocs]

    return await blocking(
        ctx.replog, opts, compute, answer_ok, index_of=lambda: ctx.t.index["allocs"]
    )


async def read_allocation(ctx: ApiContext, req: Request, alloc_id: str) -> Any:
    opts = parse_options(req)
    acl = ctx.resolve(req)

    def compute() -> tuple[int, Any]:
        try:
            a = _by_prefix(ctx.t.allocs, alloc_id, "alloc")
        except HttpError:
            return ctx.t.index["allocs"], None
        return a["ModifyIndex"], a

    def answer(index: int, alloc: Any) -> Any:
        if alloc is None:
            raise HttpError(404, "alloc not found")
        if not acl.allow_ns(alloc["Namespace"], "read-job"):
            raise HttpError(403, "Permission denied")
        return ok(alloc_full(ctx.t, alloc), index=index)

    return await blocking(ctx.replog, opts, compute, answer)


async def list_evaluations(ctx: ApiContext, req: Request) -> Any:
    opts = parse_options(req)
    acl = ctx.resolve(req)
    status = req.q("status")
    job = req.q("job")

    def compute() -> tuple[int, Any]:
        evs = sorted(
            (
                e
                for e in ctx.t.evals.values()
                if e["ID"].startswith(opts.prefix)
                and _ns_ok(ctx, req, acl, e["Namespace"])
                and (not status or e["Status"] == status)
                and (not job or e["JobID"] == job)
            ),
            key=lambda e: e["ID"],
        )
        return ctx.t.index["evals"], [public(e) for e in _filtered(opts, evs)]

    return await blocking(
        ctx.replog, opts, compute, answer_ok, index_of=lambda: ctx.t.index["evals"]
    )


async def read_evaluation(ctx: ApiContext, req: Request, eval_id: str) -> Any:
    opts = parse_options(req)
    acl = ctx.resolve(req)

    def compute() -> tuple[int, Any]:
        try:
            e = _by_prefix(ctx.t.evals, eval_id, "eval")
        except HttpError:
            return ctx.t.index["evals"], None
        return e["ModifyIndex"], public(e)

    def answer(index: int, body: Any) -> Any:
        if body is None:
            raise HttpError(404, "eval not found")
        if not acl.allow_ns(body["Namespace"], "read-job"):
            raise HttpError(403, "Permission denied")
        return ok(body, index=index)

    return await blocking(ctx.replog, opts, compute, answer)


async def evaluation_allocations(ctx: ApiContext, req: Request, eval_id: str) -> Any:
    opts = parse_options(req)
    ctx.resolve(req)

    def compute() -> tuple[int, Any]:
        ids = ctx.t.allocs_by_eval.get(eval_id, set())
        return ctx.t.index["allocs"], [alloc_stub(ctx.t.allocs[i]) for i in sorted(ids)]

    return await blocking(
        ctx.replog, opts, compute, answer_ok, index_of=lambda: ctx.t.index["allocs"]
    )


async def list_deployments(ctx: ApiContext, req: Request) -> Any:
    opts = parse_options(req)
    acl = ctx.resolve(req)

    def compute() -> tuple[int, Any]:
        deps = sorted(
            (
                d
                for d in ctx.t.deployments.values()
                if d["ID"].startswith(opts.prefix) and _ns_ok(ctx, req, acl, d["Namespace"])
            ),
            key=lambda d: d["ID"],
        )
        return ctx.t.index["deployment"], [public(d) for d in _filtered(opts, deps)]

    return await blocking(
        ctx.replog, opts, compute, answer_ok, index_of=lambda: ctx.t.index["deployment"]
    )


async def read_deployment(ctx: ApiContext, req: Request, dep_id: str) -> Any:
    opts = parse_options(req)
    acl = ctx.resolve(req)

    def compute() -> tuple[int, Any]:
        try:
            d = _by_prefix(ctx.t.deployments, dep_id, "deployment")
        except HttpError:
            return ctx.t.index["deployment"], None
        return d["ModifyIndex"], public(d)

    def answer(index: int, body: Any) -> Any:
        if body is None:
            raise HttpError(404, "deployment not found")
        if not acl.allow_ns(body["Namespace"], "read-job"):
            raise HttpError(403, "Permission denied")
        return ok(body, index=index)

    return await blocking(ctx.replog, opts, compute, answer)


async def deployment_allocations(ctx: ApiContext, req: Request, dep_id: str) -> Any:
    opts = parse_options(req)
    ctx.resolve(req)

    def compute() -> tuple[int, Any]:
        allocs = sorted(
            (a for a in ctx.t.allocs.values() if a.get("DeploymentID") == dep_id),
            key=lambda a: a["ID"],
        )
        return ctx.t.index["allocs"], [alloc_stub(a) for a in allocs]

    return await blocking(
        ctx.replog, opts, compute, answer_ok, index_of=lambda: ctx.t.index["allocs"]
    )


async def promote_deployment(ctx: ApiContext, req: Request, dep_id: str) -> Any:
    data = req.json() or {}
    if not isinstance(data, dict):
        raise bad("Failed to decode request body")
    dep = ctx.t.deployments.get(dep_id)
    if dep is None:
        raise HttpError(404, "deployment not found")
    ctx.require_ns(req, dep["Namespace"], "submit-job")
    groups = None if data.get("All") else data.get("Groups")
    index, result = await ctx.append("deployment.promote", {"id": dep_id, "groups": groups})
    return ok({**result, "Index": index}, index=index)


async def fail_deployment(ctx: ApiContext, req: Request, dep_id: str) -> Any:
    dep = ctx.t.deployments.get(dep_id)
    if dep is None:
        raise HttpError(404, "deployment not found")
    ctx.require_ns(req, dep["Namespace"], "submit-job")
    if dep["Status"] != "running":
        raise bad("can't fail terminal deployment")  # Nomad's exact text
    index, result = await ctx.append(
        "deployment.status",
        {"id": dep_id, "status": "failed", "description": "Deployment marked as failed"},
    )
    return ok({**result, "Index": index}, index=index)


async def leader(ctx: ApiContext, req: Request) -> Any:
    return ok(ctx.advertise)


async def peers(ctx: ApiContext, req: Request) -> Any:
    return ok([ctx.advertise])


async def regions(ctx: ApiContext, req: Request) -> Any:
    return ok([ctx.region])


async def agent_self(ctx: ApiContext, req: Request) -> Any:
    ctx.require(req, "agent", write=False)
    return ok(
        {
            "config": {
                "Region": ctx.region,
                "Datacenter": ctx.datacenter,
                "ACL": {"Enabled": ctx.acl_enabled},
                "Server": {"Enabled": True},
                "Version": {"Version": "1.8.0", "VersionPrerelease": "", "Revision": "trellis"},
            },
            "member": {
                "Name": f"trellis.{ctx.region}",
                "Addr": ctx.advertise.split(":")[0],
                "Port": 4648,
                "Status": "alive",
                "Tags": {"region": ctx.region, "dc": ctx.datacenter, "role": "nomad"},
            },
            "stats": {
                "nomad": {"leader": "true", "known_regions": "1"},
                "raft": {"applied_index": str(ctx.replog.applied_index)},
            },
        }
    )
