"""Namespaces (/v1/namespaces, /v1/namespace/:name): Nomad's shape and rules. `default` always
exists and cannot be deleted; a namespace with live jobs or variables cannot be deleted;
writing needs a management token, reading any capability in the namespace."""

from __future__ import annotations

import re
from typing import Any

from services.scheduler.api.context import PERMISSION_DENIED, ApiContext
from services.scheduler.api.http import HttpError, Request, bad, ok
from services.scheduler.api.query import answer_ok, blocking, parse_options

NAME_RE = re.compile(r"^[a-zA-Z0-9-]{1,128}$")
DEFAULT = {
    "Name": "default",
    "Description": "Default shared namespace",
    "Quota": "",
    "Meta": None,
    "Capabilities": None,
    "NodePoolConfiguration": None,
    "CreateIndex": 1,
    "ModifyIndex": 1,
}


def _all(ctx: ApiContext) -> dict[str, dict[str, Any]]:
    out = {"default": DEFAULT, **ctx.t.namespaces}
    return out


def _readable(acl: Any, name: str) -> bool:
    return acl.management or bool(acl._ns_caps(name) - {"deny"})


async def list_namespaces(ctx: ApiContext, req: Request) -> Any:
    opts = parse_options(req)
    acl = ctx.resolve(req)

    def compute() -> tuple[int, Any]:
        items = [
            ns
            for name, ns in sorted(_all(ctx).items())
            if name.startswith(opts.prefix) and _readable(acl, name)
        ]
        return max(ctx.t.index["namespaces"], 1), items

    return await blocking(
        ctx.replog, opts, compute, answer_ok, index_of=lambda: ctx.t.index["namespaces"]
    )


async def read(ctx: ApiContext, req: Request, name: str) -> Any:
    if req.method != "GET":
        return await (delete(ctx, req, name) if req.method == "DELETE" else write(ctx, req, name))
    opts = parse_options(req)
    acl = ctx.resolve(req)
    if not _readable(acl, name):
        raise HttpError(403, PERMISSION_DENIED)

    def compute() -> tuple[int, Any]:
        ns = _all(ctx).get(name)
        return (ns["ModifyIndex"], ns) if ns else (ctx.t.index["namespaces"], None)

    def answer(index: int, ns: Any) -> Any:
        if ns is None:
            raise HttpError(404, "namespace not found")
        return ok(ns, index=index)

    return await blocking(ctx.replog, opts, compute, answer)


def _spec(data: Any, name: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise bad("Failed to decode request body: the namespace must be a JSON object")
    name = name or str(data.get("Name") or "")
    if data.get("Name") not in (None, "", name):
        raise bad("Namespace name does not match request path")
    if not NAME_RE.fullmatch(name):
        raise bad(f'invalid name "{name}". must match regex {NAME_RE.pattern}')
    desc = data.get("Description") or ""
    if not isinstance(desc, str) or len(desc) > 256:
        raise bad("description longer than 256")
    meta = data.get("Meta")
    if meta is not None and (
        not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values())
    ):
        raise bad("Meta must be an object of strings")
    caps = data.get("Capabilities")
    if caps is not None and not isinstance(caps, dict):
        raise bad("Capabilities must be an object")
    pools = data.get("NodePoolConfiguration")
    if pools is not None and not isinstance(pools, dict):
        raise bad("NodePoolConfiguration must be an object")
    quota = data.get("Quota") or ""
    if quota:
        raise bad(f'quota "{quota}" does not exist: quotas are an Enterprise feature')
    return {
        "Name": name,
        "Description": desc,
        "Quota": "",
        "Meta": meta or None,
        "Capabilities": caps,
        "NodePoolConfiguration": pools,
    }


async def write(ctx: ApiContext, req: Request, name: str = "") -> Any:
    ctx.require_management(req)
    spec = _spec(req.json() or {}, name)
    index, _ = await ctx.append("namespace.apply", {"op": "upsert", "namespaces": [spec]})
    return ok(None, index=index)


async def delete(ctx: ApiContext, req: Request, name: str) -> Any:
    ctx.require_management(req)
    index, _ = await ctx.append("namespace.apply", {"op": "delete", "names": [name]})
    return ok(None, index=index)
