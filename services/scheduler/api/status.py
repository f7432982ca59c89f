"""Leader, peers and the Raft configuration, answered from the mesh's own cluster view: the
scheduler replicas (members.py), their RPC addresses in Nomad's host:4647 form, and the lease
holder as leader. The replicated log's applied index stands in for the Raft index."""

from __future__ import annotations

from typing import Any

from services.scheduler.api.agent import _members
from services.scheduler.api.context import ApiContext
from services.scheduler.api.http import Request, ok
from services.scheduler.members import rpc_addr


async def leader(ctx: ApiContext, req: Request) -> Any:
    lead = await ctx.members.leader_id() if ctx.members else ""
    for m in await _members(ctx):
        if m.id == lead:
            return ok(rpc_addr(m.addr))
    return ok("")  # no leader known: Nomad answers an empty string


async def peers(ctx: ApiContext, req: Request) -> Any:
    return ok(sorted({rpc_addr(m.addr) for m in await _members(ctx)}))


async def raft_configuration(ctx: ApiContext, req: Request) -> Any:
    ctx.require(req, "operator", write=False)
    lead = await ctx.members.leader_id() if ctx.members else ""
    servers = [
        {
            "ID": m.id,
            "Node": f"{m.name}.{m.region}",
            "Address": rpc_addr(m.addr),
            "Leader": m.id == lead,
            "Voter": True,
            "RaftProtocol": "3",
        }
        for m in await _members(ctx)
    ]
    return ok({"Index": ctx.replog.applied_index, "Servers": servers})
