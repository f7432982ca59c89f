"""Node drain, forced garbage collection and prefix search."""

from __future__ import annotations

import time
from typing import Any

from services.scheduler import gc
from services.scheduler.api.context import ApiContext
from services.scheduler.api.http import HttpError, Request, bad, ok

SEARCH_CONTEXTS = ("jobs", "evals", "allocs", "nodes", "deployment", "namespaces")
SEARCH_LIMIT = 20  # Nomad truncates each context to 20 matches


async def node_drain(ctx: ApiContext, req: Request, node_id: str) -> Any:
    ctx.require(req, "node", write=True)
    data = req.json() or {}
    if not isinstance(data, dict):
        raise bad("Failed to decode request body: expected a JSON object")
    if node_id not in ctx.t.nodes:
        raise HttpError(404, "node not found")
    spec = data.get("DrainSpec")
    strategy = None
    if spec is not None:
        if not isinstance(spec, dict):
            raise bad("Failed to decode request body: DrainSpec must be an object")
        deadline = spec.get("Deadline", 0)
        if not isinstance(deadline, int) or isinstance(deadline, bool):
            raise bad("Failed to decode request body: Deadline must be an integer (ns)")
        ignore = spec.get("IgnoreSystemJobs", False)
        if not isinstance(ignore, bool):
            raise bad("Failed to decode request body: IgnoreSystemJobs must be a boolean")
        now = time.time_ns()
        # Deadline < 0 forces: everything moves now. 0 means no deadline.
        strategy = {
            "Deadline": deadline,
            "IgnoreSystemJobs": ignore,
            "ForceDeadline": now + deadline if deadline > 0 else (now if deadline < 0 else 0),
        }
    mark = data.get("MarkEligible", False)
    if not isinstance(mark, bool):
        raise bad("Failed to decode request body: MarkEligible must be a boolean")
    meta = data.get("Meta")
    if meta is not None and not isinstance(meta, dict):
        raise bad("Failed to decode request body: Meta must be an object")
    index, result = await ctx.append(
        "node.drain",
        {"node_id": node_id, "strategy": strategy, "mark_eligible": mark, "meta": meta},
    )
    return ok({**result, "LastContact": 0, "KnownLeader": True}, index=index)


async def system_gc(ctx: ApiContext, req: Request) -> Any:
    ctx.require_management(req)
    sel = gc.select(ctx.t, time.time_ns(), gc.FORCE)
    if not sel.empty():
        await ctx.append("gc.apply", sel.payload())
    return ok(None)


async def search(ctx: ApiContext, req: Request) -> Any:
    data = req.json()
    if not isinstance(data, dict):
        raise bad("Failed to decode request body: expected a JSON object")
    prefix = data.get("Prefix", "")
    context = data.get("Context") or "all"
    if not isinstance(prefix, str) or not isinstance(context, str):
        raise bad("Failed to decode request body: Prefix and Context must be strings")
    if context != "all" and context not in SEARCH_CONTEXTS:
        raise bad(f'Invalid context "{context}"')
    ns = req.namespace
    acl = ctx.resolve(req)
    t = ctx.t
    found: dict[str, list[str]] = {}
    if acl.allow_ns(ns, "read-job") or ns == "*":
        found["jobs"] = [
            j["ID"]
            for j in t.jobs.values()
            if (ns == "*" or j["Namespace"] == ns) and acl.allow_ns(j["Namespace"], "read-job")
        ]
        found["evals"] = [
            e["ID"]
            for e in t.evals.values()
            if (ns == "*" or e["Namespace"] == ns) and acl.allow_ns(e["Namespace"], "read-job")
        ]
        found["allocs"] = [
            a["ID"]
            for a in t.allocs.values()
            if (ns == "*" or a["Namespace"] == ns) and acl.allow_ns(a["Namespace"], "read-job")
        ]
        found["deployment"] = [
            d["ID"]
            for d in t.deployments.values()
            if (ns == "*" or d["Namespace"] == ns) and acl.allow_ns(d["Namespace"], "read-job")
        ]
    if acl.allow_level("node", False):
        found["nodes"] = list(t.nodes)
    namespaces = {j["Namespace"] for j in t.jobs.values()} | {"default"}
    found["namespaces"] = sorted(n for n in namespaces if acl.allow_ns(n, "read-job"))
    matches: dict[str, list[str]] = {}
    truncations: dict[str, bool] = {}
    for name, ids in found.items():
        if context not in ("all", name):
            continue
        hits = sorted(i for i in ids if i.startswith(prefix))
        matches[name] = hits[:SEARCH_LIMIT]
        truncations[name] = len(hits) > SEARCH_LIMIT
    index = max(t.index[n] for n in ("jobs", "evals", "allocs", "nodes", "deployment"))
    return ok({"Matches": matches, "Truncations": truncations}, index=index)


FUZZY_MIN = 2  # Nomad's default min_term_length


async def fuzzy_search(ctx: ApiContext, req: Request) -> Any:
    """Substring matches (case-insensitive) on jobs' IDs and their groups and tasks, and on
    node names; each match with its scope (namespace, job)."""
    data = req.json()
    if not isinstance(data, dict):
        raise bad("Failed to decode request body: expected a JSON object")
    text = data.get("Text", "")
    context = data.get("Context") or "all"
    if not isinstance(text, str) or not isinstance(context, str):
        raise bad("Failed to decode request body: Text and Context must be strings")
    if len(text) < FUZZY_MIN:
        raise bad(f"fuzzy search query must be at least {FUZZY_MIN} characters, got {len(text)}")
    if context not in ("all", "jobs", "nodes", "groups", "tasks", "namespaces"):
        raise bad(f'Invalid context "{context}"')
    ns = req.namespace
    acl = ctx.resolve(req)
    needle = text.lower()
    found: dict[str, list[dict[str, Any]]] = {"jobs": [], "groups": [], "tasks": []}
    for job in ctx.t.jobs.values():
        jns = job["Namespace"]
        if (ns != "*" and jns != ns) or not acl.allow_ns(jns, "read-job"):
            continue
        if needle in job["ID"].lower():
            found["jobs"].append({"ID": job["ID"], "Scope": [jns]})
        for g in job.get("TaskGroups") or []:
            if needle in g["Name"].lower():
                found["groups"].append({"ID": g["Name"], "Scope": [jns, job["ID"]]})
            for t in g.get("Tasks") or []:
                if needle in t["Name"].lower():
                    found["tasks"].append({"ID": t["Name"], "Scope": [jns, job["ID"], g["Name"]]})
    if acl.allow_level("node", False):
        found["nodes"] = [
            {"ID": n.get("Name", ""), "Scope": [n["ID"]]}
            for n in ctx.t.nodes.values()
            if needle in str(n.get("Name", "")).lower()
        ]
    matches: dict[str, list[dict[str, Any]]] = {}
    truncations: dict[str, bool] = {}
    for name, hits in found.items():
        if context not in ("all", name):
            continue
        hits.sort(key=lambda h: (len(h["ID"]), h["ID"]))  # closest (shortest) first
        matches[name] = hits[:SEARCH_LIMIT]
        truncations[name] = len(hits) > SEARCH_LIMIT
    return ok({"Matches": matches, "Truncations": truncations}, index=ctx.t.index["jobs"])
