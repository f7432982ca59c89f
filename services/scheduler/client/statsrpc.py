"""The node's side of the node-stats RPC (services/scheduler/nodestats.py): host figures and
allocation usage read from /proc, and client GC (the task dirs of finished allocations)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from typing import TYPE_CHECKING, Any

import msgspec

from services.scheduler import wire
from services.scheduler.client import hoststats
from services.scheduler.nodestats import NODE_STATS, StatsReply, StatsRequest

if TYPE_CHECKING:
    from services.scheduler.client.agent import ClientAgent


def _pid(tr: Any) -> int | None:
    handle = getattr(tr, "handle", None)
    pid = getattr(handle, "pid", None)
    return pid if isinstance(pid, int) and not getattr(tr, "dead", False) else None


def _finished(runner: Any) -> bool:
    return all(getattr(tr, "dead", False) for tr in runner.tasks.values())


def _gc(agent: ClientAgent, alloc_ids: list[str]) -> int:
    """Remove the alloc dirs of finished allocations; the runners stay (so nothing restarts)."""
    removed = 0
    for aid in alloc_ids:
        runner = agent.runners.get(aid)
        if runner is None or not _finished(runner):
            continue
        path = os.path.join(agent.data_dir, "alloc", aid) if agent.data_dir else ""
        if path and os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
    return removed


def answer(agent: ClientAgent, req: StatsRequest, reply: StatsReply) -> None:
    """Blocking (reads /proc, samples CPU): run in a thread."""
    if req.op == "host":
        reply.body = hoststats.host_stats(agent.data_dir or "/")
    elif req.op == "alloc":
        runner = agent.runners.get(req.alloc_id)
        if runner is None:
            reply.code, reply.error = 404, f"unknown allocation ID {req.alloc_id!r}"
            return
        reply.body = hoststats.alloc_usage({n: _pid(tr) for n, tr in runner.tasks.items()})
    elif req.op == "gc":
        reply.body = {"removed": _gc(agent, list(agent.runners))}
    elif req.op == "gc-alloc":
        runner = agent.runners.get(req.alloc_id)
        if runner is None:
            reply.code, reply.error = 404, f"unknown allocation ID {req.alloc_id!r}"
        elif not _finished(runner):
            reply.code, reply.error = 400, "cannot garbage collect a running allocation"
        else:
            reply.body = {"removed": _gc(agent, [req.alloc_id])}
    else:
        reply.code, reply.error = 400, f"unknown stats operation {req.op!r}"


async def serve(agent: ClientAgent, node_id: str) -> None:
    async def on_msg(msg: Any) -> None:
        if not msg.reply:
            return
        reply = StatsReply(node_id=node_id, secret=agent.secrets[node_id])
        try:
            req = msgspec.msgpack.decode(msg.data, type=StatsRequest)
            await asyncio.to_thread(answer, agent, req, reply)
        except msgspec.DecodeError:
            reply.code, reply.error = 400, "malformed stats request"
        except OSError as exc:
            reply.code, reply.error = 500, f"reading node figures failed: {exc.strerror}"
        with contextlib.suppress(Exception):
            await agent.bus.nc.publish(msg.reply, msgspec.msgpack.encode(reply))

    subject = wire.subject(agent.cluster, f"{NODE_STATS}.{node_id}")
    await agent.bus.nc.subscribe(subject, cb=on_msg)
