"""/v1/client/stats, /v1/client/allocation/:id/stats, /v1/client/gc and
/v1/client/allocation/:id/gc: forwarded over the bus to the node concerned (nodestats.py),
whose answer counts only when it carries that node's secret."""

from __future__ import annotations

from typing import Any

import msgspec

from services.scheduler import nodeauth, wire
from services.scheduler.api.context import ApiContext
from services.scheduler.api.http import HttpError, Request, bad, ok
from services.scheduler.nodestats import NODE_STATS, StatsReply, StatsRequest

NODE_TIMEOUT = 10.0


async def ask(ctx: ApiContext, node_id: str, sr: StatsRequest) -> dict[str, Any]:
    node = ctx.t.nodes.get(node_id)
    if node is None or ctx.bus is None:
        raise HttpError(404, f"Unknown node {node_id!r}")
    if node.get("Status") == "down":
        raise HttpError(400, f"node {node_id} is down")
    subject = wire.subject(ctx.cluster, f"{NODE_STATS}.{node_id}")
    try:
        msg = await ctx.bus.nc.request(subject, msgspec.msgpack.encode(sr), timeout=NODE_TIMEOUT)
    except Exception:
        raise HttpError(504, f"node {node_id} did not answer") from None
    try:
        reply = msgspec.msgpack.decode(msg.data, type=StatsReply)
    except msgspec.DecodeError:
        raise HttpError(502, f"node {node_id} gave a malformed answer") from None
    if reply.node_id != node_id or not nodeauth.matches(node, reply.secret):
        raise HttpError(502, f"the answer did not come from node {node_id}")
    if reply.code != 200:
        raise HttpError(reply.code if 400 <= reply.code < 600 else 500, reply.error)
    return reply.body or {}


def _node_id(ctx: ApiContext, req: Request) -> str:
    """`node_id` (a prefix will do); without it, the only client node (as `nomad agent -dev`,
    whose HTTP agent is also its one client)."""
    want = req.q("node_id")
    if not want:
        if len(ctx.t.nodes) == 1:
            return next(iter(ctx.t.nodes))
        raise bad("node_id is required: this agent serves more than one client node")
    if want in ctx.t.nodes:
        return want
    found = [n for n in ctx.t.nodes if len(want) >= 2 and n.startswith(want)]
    if len(found) != 1:
        raise HttpError(404, f"Unknown node {want!r}")
    return found[0]


def _alloc(ctx: ApiContext, req: Request, alloc_id: str, cap: str) -> dict[str, Any]:
    a = ctx.t.allocs.get(alloc_id)
    if a is None:
        found = [
            v for k, v in ctx.t.allocs.items() if len(alloc_id) >= 2 and k.startswith(alloc_id)
        ]
        if len(found) != 1:
            raise HttpError(404, f"Unknown allocation {alloc_id!r}")
        a = found[0]
    ctx.require_ns(req, a["Namespace"], cap)
    return a


async def client_stats(ctx: ApiContext, req: Request) -> Any:
    ctx.require(req, "node", write=False)
    return ok(await ask(ctx, _node_id(ctx, req), StatsRequest(op="host")))


async def alloc_stats(ctx: ApiContext, req: Request, alloc_id: str) -> Any:
    a = _alloc(ctx, req, alloc_id, "read-job")
    return ok(await ask(ctx, a["NodeID"], StatsRequest(op="alloc", alloc_id=a["ID"])))


async def client_gc(ctx: ApiContext, req: Request) -> Any:
    ctx.require(req, "node", write=True)
    await ask(ctx, _node_id(ctx, req), StatsRequest(op="gc"))
    return ok(None)


async def alloc_gc(ctx: ApiContext, req: Request, alloc_id: str) -> Any:
    a = _alloc(ctx, req, alloc_id, "submit-job")
    await ask(ctx, a["NodeID"], StatsRequest(op="gc-alloc", alloc_id=a["ID"]))
    return ok(None)
