"""The scheduler service process: the replicated state, the HTTP API, client RPCs, scheduler
workers on every replica, and the leader's singleton duties (eval broker, heartbeat expiry)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from typing import Any

import msgspec
import nats.js.errors
import structlog
from nats.aio.msg import Msg
from nats.js.api import KeyValueConfig, StorageType

from services.scheduler import wire
from services.scheduler.api.context import ApiContext
from services.scheduler.api.router import Router
from services.scheduler.broker import EvalBroker
from services.scheduler.heartbeat import HeartbeatTracker
from services.scheduler.housekeeper import Housekeeper
from services.scheduler.members import Member, Membership
from services.scheduler.rpc import ClientRpc
from services.scheduler.state.fsm import SchedulerFSM
from services.scheduler.tasksecrets import TaskSecrets
from services.scheduler.worker import Worker
from shared.api_session import SealedRequest, serve_api
from shared.bus import ERROR, Bus, decoder_for, encode
from shared.leader import LeaderLease
from shared.messages import BusError
from shared.replog import ReplicatedLog
from shared.sealing import Keys, bus_fetch
from shared.service_identity import load_service_key
from shared.settings import Settings
from shared.subjects import API_SCHEDULER

log = structlog.get_logger("scheduler")

RPC_QUEUE = "sched-rpc"
BROKER_QUEUE = "sched-broker"


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").lower() in ("1", "true", "yes", "on")


class SchedulerService:
    name = "scheduler"

    def __init__(
        self,
        bus: Bus,
        settings: Settings,
        *,
        workers: int = 1,
        heartbeat_ttl: float = 10.0,
        lease_ttl: float = 10.0,
        nack_timeout: float = 60.0,
        acl_enabled: bool | None = None,
        management_token: str | None = None,
    ) -> None:
        self.bus = bus
        self.settings = settings
        self.cluster = settings.cluster_name
        # Under `trellis dev`/`server` the supervisor names each child slot (one process at a
        # time): a restarted replica is the same lease holder and leads again at once.
        instance = os.environ.get("TRELLIS_INSTANCE_ID", "")
        self.replica_id = instance or f"{bus.name}-{uuid.uuid4().hex[:8]}"
        # This replica's identity (shared/service_identity.py), checked by the gateway.
        self.service_key = load_service_key(settings, "scheduler")
        self.fsm = SchedulerFSM()
        self.replog: ReplicatedLog | None = None
        self.lease: LeaderLease | None = None
        self.members: Membership | None = None
        self.broker: EvalBroker | None = None
        self.heartbeat_ttl = heartbeat_ttl
        self.lease_ttl = lease_ttl
        self.nack_timeout = nack_timeout
        self.n_workers = workers
        self.workers: list[Worker] = []
        self.acl_enabled = (
            (settings.scheduler_acl or _env_flag("TRELLIS_SCHEDULER_ACL"))
            if acl_enabled is None
            else acl_enabled
        )
        self.management_token = (
            (
                settings.scheduler_management_token
                or os.environ.get("TRELLIS_SCHEDULER_MANAGEMENT_TOKEN", "")
            )
            if management_token is None
            else management_token
        )
        # The server's data dir: where an operator writes acl-bootstrap-reset.
        self.server_dir = os.path.join(settings.data_dir, "scheduler") if settings.data_dir else ""
        self._leader_subs: list[Any] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stopping = False
        self.ready = False

    @property
    def is_leader(self) -> bool:
        return self.lease is not None and self.lease.is_leader

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def start(self) -> None:
        js = self.bus.nc.jetstream()
        self.replog = ReplicatedLog(
            js,
            f"{self.cluster}_sched",
            self.fsm,
            replicas=self.settings.replicas,
            should_snapshot=lambda: self.is_leader,
        )
        await self.replog.start()
        self.heartbeats = HeartbeatTracker(self.fsm, self.replog, self.heartbeat_ttl)
        self.fsm.on_pending.append(self._on_pending)
        if self.server_dir:
            os.makedirs(self.server_dir, mode=0o700, exist_ok=True)
        ctx = ApiContext(
            self.fsm,
            self.replog,
            acl_enabled=self.acl_enabled,
            management_token=self.management_token,
            advertise=self.settings.scheduler_addr,
            server_dir=self.server_dir,
            keys=Keys(bus_fetch(self.bus, self.cluster, self.service_key)),
            bus=self.bus,
            cluster=self.cluster,
            service_key=self.service_key,
        )
        self.router = Router(ctx)
        self.housekeeper = Housekeeper(ctx)
        # A configured management token is the bootstrap (acl_bootstrap.py); record it now so
        # that an anonymous POST /v1/acl/bootstrap never finds the cluster unbootstrapped.
        await ctx.record_configured_bootstrap()
        self.task_secrets = TaskSecrets(self.bus, self.settings, self.fsm)
        self.task_secrets.keys = self.router.ctx.keys  # nomadVar in templates
        await self.task_secrets.start()
        rpc = ClientRpc(self.fsm, self.replog, self.heartbeats)
        c = self.cluster
        # The API travels sealed end to end with the gateway (shared/api_session.py), and so
        # do the client nodes' RPCs (node secrets, job specs with env values), under sessions
        # the nodes open the same way.
        sessions = await serve_api(
            self.bus,
            self.service_key,
            c,
            API_SCHEDULER,
            self.router.handle,
            concurrency=self.settings.concurrency,
        )

        async def serve_rpc(name: str, handler: Any, kind: Any, **kw: Any) -> None:
            sealed = sessions.serve(handler, kind, channel=name)
            await self.bus.serve(wire.subject(c, name), sealed, SealedRequest, **kw)

        await serve_rpc(wire.NODE_REGISTER, rpc.register, wire.NodeRegister, queue=RPC_QUEUE)
        await serve_rpc(
            wire.NODE_ALLOCS, rpc.allocs, wire.NodeAllocs, queue=RPC_QUEUE, concurrency=1024
        )
        await serve_rpc(wire.ALLOC_UPDATE, rpc.update, wire.AllocUpdate, queue=RPC_QUEUE)
        await serve_rpc(wire.HEARTBEAT, rpc.heartbeat, wire.Heartbeat)
        await serve_rpc(
            wire.TASK_SECRETS,
            self.task_secrets.handle,
            wire.TaskSecretsRequest,
            queue=RPC_QUEUE,
        )
        # Clients re-poll now: a poll held by a replica that died (or sent while the bus was
        # down) is never answered and would wait out its timeout (wire.REPLICA_UP).
        await self._announce_up()
        self.bus.reconnect_hooks.append(self._announce_up)
        kv = await self._lease_bucket(js)
        self.lease = LeaderLease(
            kv,
            "leader",
            self.replica_id,
            ttl=self.lease_ttl,
            on_elected=self._elected,
            on_demoted=self._demoted,
        )
        await self.lease.start()
        host = self.settings.scheduler_addr.rsplit(":", 1)[0] or "127.0.0.1"
        self.members = Membership(kv, Member(id=self.replica_id, name=self.replica_id, addr=host))
        await self.members.start()
        self.router.ctx.members = self.members
        for i in range(self.n_workers):
            w = Worker(self.bus, c, self.fsm, self.replog, f"{self.replica_id}-w{i}")
            w.start()
            self.workers.append(w)
        self.ready = True
        log.info("scheduler started", replica=self.replica_id, index=self.replog.applied_index)

    async def _announce_up(self) -> None:
        await self.bus.nc.publish(wire.subject(self.cluster, wire.REPLICA_UP), b"")

    async def _lease_bucket(self, js: Any) -> Any:
        bucket = f"{self.cluster}_sched_leader"
        try:
            return await js.key_value(bucket)
        except nats.js.errors.BucketNotFoundError:
            try:
                return await js.create_key_value(
                    KeyValueConfig(
                        bucket=bucket,
                        history=1,
                        storage=StorageType.FILE,
                        replicas=self.settings.replicas,
                    )
                )
            except nats.js.errors.BadRequestError:
                return await js.key_value(bucket)

    async def stop(self) -> None:
        self.ready = False
        self._stopping = True
        for w in self.workers:
            await w.stop()
        if self.lease is not None:
            await self.lease.stop()
        if hasattr(self, "task_secrets"):
            await self.task_secrets.stop()
        if self.members is not None:
            await self.members.stop()
        await self._demoted()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)
        if self.replog is not None:
            await self.replog.stop()

    # -- leadership

    def _on_pending(self, ev: dict[str, Any]) -> None:
        if self.broker is not None:
            self.broker.enqueue(ev)

    async def _elected(self) -> None:
        assert self.replog is not None
        broker = EvalBroker(
            nack_timeout=self.nack_timeout,
            on_failed=self._eval_failed,
            on_cancel=self._evals_canceled,
        )
        self.broker = broker
        await self._serve_leader(
            wire.subject(self.cluster, wire.DEQUEUE), self._dequeue, wire.Dequeue
        )
        await self._serve_leader(wire.subject(self.cluster, wire.ACK), self._ack, wire.Ack)
        with contextlib.suppress(Exception):
            await self.replog.barrier()
        if self._stopping:
            return  # stop() ran meanwhile (its lease wait may end first): start no duties now
        for ev in sorted(self.fsm.t.evals.values(), key=lambda e: e["CreateIndex"]):
            if ev["Status"] == "pending":
                broker.enqueue(ev)
        self.heartbeats.elected()
        self.housekeeper.elected()
        log.info("scheduler leader", replica=self.replica_id)

    async def _demoted(self) -> None:
        for sub in self._leader_subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        self._leader_subs.clear()
        if self.broker is not None:
            self.broker.disable()
            self.broker = None
        if hasattr(self, "heartbeats"):
            await self.heartbeats.demoted()
        if hasattr(self, "housekeeper"):
            await self.housekeeper.demoted()

    async def _serve_leader(self, subject: str, handler: Any, kind: Any) -> None:
        """A subscription only the leader holds (the broker lives in its memory)."""
        dec = decoder_for(kind)

        async def run(msg: Msg) -> None:
            try:
                reply = encode(await handler(dec.decode(msg.data)))
                hdrs = None
            except Exception as exc:  # answer, never raise into nats-py
                log.warning("broker request failed", error=str(exc))
                reply, hdrs = encode(BusError(code=500, message="broker error")), {ERROR: "1"}
            if msg.reply:
                with contextlib.suppress(Exception):
                    await self.bus.nc.publish(msg.reply, reply, headers=hdrs)

        async def on_msg(msg: Msg) -> None:
            self._spawn(run(msg))

        self._leader_subs.append(
            await self.bus.nc.subscribe(subject, queue=BROKER_QUEUE, cb=on_msg)
        )

    async def _dequeue(self, req: wire.Dequeue) -> wire.DequeueReply:
        broker = self.broker
        if broker is None:
            return wire.DequeueReply()
        got = await broker.dequeue(req.types, min(req.wait, 10.0))
        if got is None:
            return wire.DequeueReply()
        return wire.DequeueReply(eval=got[0], token=got[1])

    async def _ack(self, req: wire.Ack) -> wire.Ok:
        if self.broker is not None:
            if req.ok:
                self.broker.ack(req.eval_id, req.token)
            else:
                self.broker.nack(req.eval_id, req.token)
        return wire.Ok()

    def _eval_failed(self, ev: dict[str, Any]) -> None:
        failed = {
            **ev,
            "Status": "failed",
            "StatusDescription": "evaluation reached delivery limit (3)",
        }
        self._spawn(self._write_evals([failed]))

    def _evals_canceled(self, evs: list[dict[str, Any]]) -> None:
        done = [
            {
                **self.fsm.t.evals.get(e["ID"], e),
                "Status": "canceled",
                "StatusDescription": "canceled after more recent eval was processed",
            }
            for e in evs
        ]
        self._spawn(self._write_evals(done))

    async def _write_evals(self, evs: list[dict[str, Any]]) -> None:
        assert self.replog is not None
        try:
            await self.replog.append("eval.upsert", msgspec.msgpack.encode({"evals": evs}))
        except Exception as exc:
            log.warning("eval status write failed", error=str(exc))
