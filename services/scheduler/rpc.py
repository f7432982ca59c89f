"""Client-node RPCs served by every replica: register nodes, long-poll their allocations,
accept their allocation status updates. Every RPC is authenticated by the node secrets it
carries (services/scheduler/nodeauth.py); a forged one is refused and changes nothing."""

from __future__ import annotations

import time
from typing import Any

import msgspec
import structlog

from services.scheduler import nodeauth, wire
from services.scheduler.heartbeat import HeartbeatTracker
from services.scheduler.state.fsm import SchedulerFSM
from shared.bus import CallContext
from shared.deferred import Deferred
from shared.errors import ServiceError
from shared.replog import ApplyError, ReplicatedLog

log = structlog.get_logger("scheduler.rpc")

MAX_ALLOCS_PER_REPLY = 2000

_CLIENT_FIELDS = (
    "ID",
    "Namespace",
    "JobID",
    "JobVersion",
    "TaskGroup",
    "Name",
    "NodeID",
    "DesiredStatus",
    "ClientStatus",
    "DeploymentID",
    "DeploymentStatus",
    "ModifyIndex",
    "AllocModifyIndex",
    "EvalID",
)


class ClientRpc:
    def __init__(
        self, fsm: SchedulerFSM, replog: ReplicatedLog, heartbeats: HeartbeatTracker
    ) -> None:
        self.fsm = fsm
        self.replog = replog
        self.heartbeats = heartbeats

    async def _append(self, kind: str, payload: dict[str, Any]) -> int:
        try:
            index, _ = await self.replog.append(kind, msgspec.msgpack.encode(payload))
        except ApplyError as exc:
            raise ServiceError(exc.code, exc.message) from None
        return index

    def _authenticate(self, node_ids: Any, secrets: dict[str, str]) -> None:
        bad = nodeauth.refused(self.fsm.t.nodes, node_ids, secrets)
        if bad:
            log.warning("client RPC refused: node secret missing or wrong", nodes=len(bad))
            raise ServiceError(403, nodeauth.PERMISSION_DENIED)

    async def register(self, req: wire.NodeRegister, _: CallContext) -> wire.NodeRegistered:
        nodes = []
        for n in req.nodes:
            if not isinstance(n.get("ID"), str) or not n["ID"]:
                raise ServiceError(400, "missing node ID")
            secret = n.get("SecretID")
            if not nodeauth.valid_secret(secret):
                raise ServiceError(
                    400, f"node SecretID missing or shorter than {nodeauth.MIN_SECRET_LEN}"
                )
            # Internal fields are the scheduler's own; only the secret's hash is kept.
            rec = {k: v for k, v in n.items() if k != "SecretID" and not k.startswith("_")}
            rec[nodeauth.HASH_FIELD] = nodeauth.secret_hash(secret)
            if not nodeauth.may_register(self.fsm.t.nodes.get(n["ID"]), rec[nodeauth.HASH_FIELD]):
                raise ServiceError(403, nodeauth.REGISTER_MISMATCH)
            nodes.append(rec)
        index = await self._append("node.register", {"nodes": nodes})  # apply checks again
        self.heartbeats.seen([n["ID"] for n in nodes])
        return wire.NodeRegistered(index=index, heartbeat_ttl=self.heartbeats.ttl)

    async def heartbeat(self, req: wire.Heartbeat, _: CallContext) -> None:
        # No reply to refuse with: only nodes whose secret matches count as seen.
        nodes = self.fsm.t.nodes
        ok = [n for n in req.node_ids if nodeauth.matches(nodes.get(n), req.secrets.get(n))]
        if len(ok) != len(req.node_ids):
            log.warning(
                "heartbeat ignored: node secret missing or wrong", nodes=len(req.node_ids) - len(ok)
            )
        self.heartbeats.seen(ok)

    def _changed(self, node_ids: list[str], index: int) -> tuple[int, list[dict[str, Any]]]:
        t = self.fsm.t
        out = [
            a
            for n in node_ids
            for aid in t.allocs_by_node.get(n, ())
            if (a := t.allocs[aid])["ModifyIndex"] > index
        ]
        if not out:
            return index, []
        out.sort(key=lambda a: a["ModifyIndex"])
        if len(out) > MAX_ALLOCS_PER_REPLY:
            # Cut between two indexes, so the client's next poll resumes without gaps.
            cut = out[MAX_ALLOCS_PER_REPLY - 1]["ModifyIndex"]
            out = [a for a in out if a["ModifyIndex"] <= cut]
        return out[-1]["ModifyIndex"], out

    async def allocs(self, req: wire.NodeAllocs, _: CallContext) -> wire.NodeAllocsReply | Deferred:
        await self.replog.barrier()
        self._authenticate(req.node_ids, req.secrets)
        new_index, changed = self._changed(req.node_ids, req.index)
        if changed or req.wait <= 0:
            return self._allocs_reply(req, new_index, changed)
        return self._park_allocs(req, time.monotonic() + req.wait)

    def _park_allocs(self, req: wire.NodeAllocs, deadline: float) -> Deferred:
        """The node's long poll waits as a Deferred (shared/deferred.py): no handler slot held,
        and a stopping replica answers it at once instead of holding its shutdown for the
        whole wait."""
        ready = self.replog.park(self.replog.applied_index, max(0.0, deadline - time.monotonic()))

        async def finish() -> wire.NodeAllocsReply | Deferred:
            # True: the log moved; False: the wait ran out; None: the bus is closing.
            woke = ready.result() if ready.done() and not ready.cancelled() else None
            new_index, changed = self._changed(req.node_ids, req.index)
            if not changed and woke is True and time.monotonic() < deadline:
                return self._park_allocs(req, deadline)  # not this node's change: wait on
            return self._allocs_reply(req, new_index, changed)

        return Deferred(ready, finish)

    def _allocs_reply(
        self, req: wire.NodeAllocs, new_index: int, changed: list[dict[str, Any]]
    ) -> wire.NodeAllocsReply:
        groups: dict[str, dict[str, Any]] = {}
        slim = []
        for a in changed:
            gkey = f"{a['Namespace']}\x00{a['JobID']}\x00{a['JobVersion']}\x00{a['TaskGroup']}"
            if gkey not in groups:
                job = (
                    self.fsm.t.job_version(a["Namespace"], a["JobID"], a["JobVersion"])
                    or self.fsm.t.jobs.get(f"{a['Namespace']}\x00{a['JobID']}")
                    or {}
                )
                tg = next(
                    (g for g in job.get("TaskGroups") or [] if g["Name"] == a["TaskGroup"]), {}
                )
                groups[gkey] = {
                    "Group": tg,
                    "JobType": job.get("Type", ""),
                    "Meta": job.get("Meta") or {},
                    "JobName": job.get("Name", ""),
                    "ParentID": job.get("ParentID", ""),
                    "Region": job.get("Region", "global"),
                    "Payload": job.get("Payload") or "",
                }
            slim.append({k: a.get(k) for k in _CLIENT_FIELDS})
        return wire.NodeAllocsReply(index=max(new_index, req.index), allocs=slim, groups=groups)

    async def update(self, req: wire.AllocUpdate, _: CallContext) -> wire.Ok:
        if not req.updates:
            return wire.Ok(index=self.replog.applied_index)
        for u in req.updates:
            if not isinstance(u, dict) or not isinstance(u.get("ID"), str):
                raise ServiceError(400, "each allocation update needs an ID")
        if not req.secrets:
            raise ServiceError(403, nodeauth.PERMISSION_DENIED)
        self._authenticate(req.secrets.keys(), req.secrets)
        # Apply takes updates only for allocations on the nodes authenticated here.
        payload = {"updates": req.updates, "node_ids": sorted(req.secrets)}
        index = await self._append("alloc.client_update", payload)
        return wire.Ok(index=index)
