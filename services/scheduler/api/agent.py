"""The agent endpoints python-nomad calls (/v1/agent/members|servers|health|join|force-leave),
answered from the mesh's own view of its scheduler servers (members.py)."""

from __future__ import annotations

from typing import Any

from services.scheduler.api.context import ApiContext
from services.scheduler.api.http import HttpError, Request, bad, ok
from services.scheduler.members import RPC_PORT, SERF_PORT, Member, rpc_addr

VERSION = "1.8.0"


async def _members(ctx: ApiContext) -> list[Member]:
    if ctx.members is None:
        raise HttpError(500, "this scheduler has no member view")
    return await ctx.members.members()


def _member(ctx: ApiContext, m: Member, leader: str) -> dict[str, Any]:
    return {
        "Name": f"{m.name}.{m.region}",
        "Addr": m.addr,
        "Port": SERF_PORT,
        "Status": "alive",
        "Tags": {
            "role": "nomad",
            "region": m.region,
            "dc": m.datacenter,
            "build": VERSION,
            "port": str(RPC_PORT),
            "id": m.id,
            "leader": "true" if m.id == leader else "false",
            "raft_vsn": "3",
            "rpc_addr": m.addr,
        },
        "ProtocolMin": 1,
        "ProtocolMax": 5,
        "ProtocolCur": 2,
        "DelegateMin": 2,
        "DelegateMax": 5,
        "DelegateCur": 4,
    }


async def members(ctx: ApiContext, req: Request) -> Any:
    ctx.require(req, "node", write=False)
    found = await _members(ctx)
    leader = await ctx.members.leader_id() if ctx.members else ""
    me = ctx.members.me if ctx.members else None
    return ok(
        {
            "ServerName": me.name if me else "",
            "ServerRegion": ctx.region,
            "ServerDC": ctx.datacenter,
            "Members": [_member(ctx, m, leader) for m in found],
        }
    )


async def servers(ctx: ApiContext, req: Request) -> Any:
    if req.method == "GET":
        ctx.require(req, "agent", write=False)
        return ok(sorted({rpc_addr(m.addr) for m in await _members(ctx)}))
    # A client agent's server list: Trellis clients reach servers through the bus, so there is
    # nothing to change; check the addresses as Nomad does and accept them.
    ctx.require(req, "agent", write=True)
    addrs = req.query.get("address", [])
    if not addrs:
        raise bad("missing server address")
    return ok(None)


async def health(ctx: ApiContext, req: Request) -> Any:
    """Nomad answers 200 when healthy, 500 with the same body when the server is not."""
    body: dict[str, Any] = {"server": {"ok": True, "message": "ok"}}
    found = await _members(ctx)
    if not found:
        body["server"] = {"ok": False, "message": "no known servers"}
    ready = [n for n in ctx.t.nodes.values() if n.get("Status") == "ready"]
    if ctx.t.nodes:
        body["client"] = (
            {"ok": True, "message": "ok"}
            if ready
            else {"ok": False, "message": "no clients are ready"}
        )
    resp = ok(body)
    if not body["server"]["ok"]:  # client nodes are separate processes: reported, not fatal
        resp.status = 500
    return resp


async def join(ctx: ApiContext, req: Request) -> Any:
    """Servers join the mesh through NATS, not by address: addresses of current members count
    as joined, any other is reported in `error`, as Nomad reports a failed join."""
    ctx.require(req, "agent", write=True)
    addrs = req.query.get("address", [])
    if not addrs:
        raise bad("missing address to join")
    known = set()
    for m in await _members(ctx):
        known |= {m.addr, rpc_addr(m.addr), f"{m.addr}:{SERF_PORT}"}
    joined = [a for a in addrs if a in known]
    missing = [a for a in addrs if a not in known]
    error = ""
    if missing:
        error = (
            f"{len(missing)} error(s) occurred: not a member of this mesh: {', '.join(missing)}"
            " (scheduler servers join through the NATS cluster)"
        )
    return ok({"num_joined": len(joined), "error": error})


async def force_leave(ctx: ApiContext, req: Request) -> Any:
    ctx.require(req, "agent", write=True)
    node = req.q("node")
    if not node:
        raise bad("missing node to force leave")
    # Nomad answers 200 for a name it does not know, too.
    if ctx.members is not None:
        await ctx.members.forget(node.split(".")[0])
    return ok(None)
