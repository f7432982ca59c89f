"""The client agent: registers one or many (simulated) nodes, heartbeats for them, long-polls
their allocations and runs them, and sends allocation updates back in batches. Every RPC carries
the node secrets it speaks for (a real node keeps its ID and secret in its data dir)."""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import os
import platform
import signal
import socket
import tempfile
import uuid
from dataclasses import dataclass, field
from typing import Any

import msgspec
import structlog
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from services.scheduler import sealbox, wire
from services.scheduler.client import fsops, identity, statsrpc
from services.scheduler.client.allocrunner import AllocRunner
from services.scheduler.client.drivers import Driver, MockDriver, RawExecDriver
from services.scheduler.client.taskdir import TaskUsers
from services.scheduler.client.taskenv import JobInfo
from shared import service_proof
from shared.api_session import SessionClient
from shared.bus import Bus
from shared.cluster_identity import load_identity
from shared.errors import ServiceError
from shared.settings import Settings
from shared.subjects import API_SCHEDULER

log = structlog.get_logger("scheduler.client")

FLUSH_EVERY = 0.1
UPDATE_BATCH = 500


@dataclass
class NodeConfig:
    name: str = ""
    datacenter: str = "dc1"
    node_pool: str = "default"
    node_class: str = ""
    cpu: int = 4 * 3500
    memory_mb: int = 8192
    disk_mb: int = 100 * 1024
    meta: dict[str, str] = field(default_factory=dict)
    drivers: tuple[str, ...] = ("raw_exec", "mock")
    data_dir: str = ""
    # Who tasks run as when the agent is root (client settings task_user, allow_root_tasks).
    task_users: TaskUsers = field(default_factory=TaskUsers)


def build_node(cfg: NodeConfig, node_id: str, name: str) -> dict[str, Any]:
    drivers = {}
    attrs = {
        "kernel.name": platform.system().lower(),
        "arch": platform.machine(),
        "os.name": platform.system().lower(),
        "nomad.version": "1.8.0",
        "unique.hostname": name,
        "cpu.numcores": str(os.cpu_count() or 1),
        "memory.totalbytes": str(cfg.memory_mb * 1024 * 1024),
    }
    for d in cfg.drivers:
        for alias in (d, "mock_driver") if d == "mock" else (d,):
            drivers[alias] = {
                "Detected": True,
                "Healthy": True,
                "HealthDescription": "Healthy",
                "Attributes": None,
            }
            attrs[f"driver.{alias}"] = "1"
    return {
        "ID": node_id,
        "Name": name,
        "Datacenter": cfg.datacenter,
        "NodeClass": cfg.node_class,
        "NodePool": cfg.node_pool,
        "Status": "ready",
        "StatusDescription": "",
        "SchedulingEligibility": "eligible",
        "Drain": False,
        "Drivers": drivers,
        "Attributes": attrs,
        "Meta": dict(cfg.meta),
        "NodeResources": {
            "Cpu": {"CpuShares": cfg.cpu},
            "Memory": {"MemoryMB": cfg.memory_mb},
            "Disk": {"DiskMB": cfg.disk_mb},
            "Networks": None,
        },
        "ReservedResources": {
            "Cpu": {"CpuShares": 100},
            "Memory": {"MemoryMB": 256},
            "Disk": {"DiskMB": 0},
        },
        "HTTPAddr": "127.0.0.1:4646",
        "TLSEnabled": False,
        "Events": None,
        "HostVolumes": None,
        "LastDrain": None,
    }


class ClientAgent:
    def __init__(
        self,
        bus: Bus,
        settings: Settings,
        node_config: NodeConfig | None = None,
        *,
        simulate: int = 0,
    ) -> None:
        self.bus = bus
        self.cluster = settings.cluster_name
        # Node secrets and job specs travel sealed to the scheduler replicas that prove the
        # scheduler's certified key (shared/api_session.py, docs/bus-security.md).
        cluster_public = load_identity(settings).public_key
        self.rpc = SessionClient(
            bus, self.cluster, "scheduler", API_SCHEDULER.on(self.cluster), cluster_public
        )
        self._fs_verifier = service_proof.Verifier(
            cluster_public, self.cluster, "scheduler", wire.FS_PURPOSE
        )
        self.cfg = node_config or NodeConfig()
        self.data_dir = self.cfg.data_dir or tempfile.mkdtemp(prefix="trellis-client-")
        os.makedirs(self.data_dir, mode=0o700, exist_ok=True)
        # Traversable, not listable: a task running as its `user` (only a root agent switches
        # users) reaches its own dir below.
        os.chmod(self.data_dir, 0o711 if os.geteuid() == 0 else 0o700)
        base = self.cfg.name or socket.gethostname()
        count = max(simulate, 1)
        self.nodes: dict[str, dict[str, Any]] = {}
        self.secrets: dict[str, str] = {}  # node ID -> its SecretID (never sent to the API)
        for i in range(count):
            if count == 1 and self.cfg.data_dir:
                # A real node: the same ID and secret after a restart.
                nid, secret = identity.load_or_create(self.data_dir)
            else:
                nid, secret = str(uuid.uuid4()), identity.new_secret()
            name = base if count == 1 else f"{base}-{i}"
            self.nodes[nid] = build_node(self.cfg, nid, name)
            self.secrets[nid] = secret
        all_drivers: dict[str, Driver] = {"raw_exec": RawExecDriver(), "mock": MockDriver()}
        self.drivers: dict[str, Driver] = {}
        for d in self.cfg.drivers:
            if d in all_drivers:
                self.drivers[d] = all_drivers[d]
                if d == "mock":
                    self.drivers["mock_driver"] = all_drivers[d]
        self.runners: dict[str, AllocRunner] = {}
        self.index = 0
        self.heartbeat_ttl = 10.0
        self.heartbeating = True
        self._pending: dict[str, dict[str, Any]] = {}
        self._flush = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._poll: asyncio.Task[wire.NodeAllocsReply] | None = None  # the long poll in flight
        self._stops: set[asyncio.Task[None]] = set()
        # Loops also check this flag: on Python 3.11 asyncio.wait_for can swallow a cancel.
        self._stopping = False
        self.ready = False

    @property
    def node_ids(self) -> list[str]:
        return list(self.nodes)

    def _subject(self, name: str) -> str:
        return wire.subject(self.cluster, name)

    async def start(self) -> None:
        await self.register()
        if len(self.nodes) == 1:  # a real node serves its allocations' files
            node_id = self.node_ids[0]
            await self.bus.nc.subscribe(self._subject(f"{wire.NODE_FS}.{node_id}"), cb=self._on_fs)
            await statsrpc.serve(self, node_id)  # host and allocation figures, client GC
        await self.bus.nc.subscribe(self._subject(wire.REPLICA_UP), cb=self._repoll)
        self.bus.reconnect_hooks.append(self._repoll)
        self._tasks = [
            asyncio.create_task(self._heartbeat_loop()),
            asyncio.create_task(self._poll_loop()),
            asyncio.create_task(self._flush_loop()),
        ]
        self.ready = True

    async def _on_fs(self, msg: Any) -> None:
        if not msg.reply:
            return
        node_id = self.node_ids[0]
        reply = wire.FsReply(node_id=node_id, secret=self.secrets[node_id])
        try:
            req = msgspec.msgpack.decode(msg.data, type=wire.FsRequest)
            # Only a genuine scheduler replica may read files or restart and signal tasks;
            # anyone else gets no answer at all (shared/service_proof.py).
            self._fs_verifier.check(req.proof, wire.fs_signed_bytes(node_id, req))
        except (msgspec.DecodeError, service_proof.NotProven) as exc:
            log.warning("fs request refused", reason=str(exc))
            return
        try:
            if req.op in ("restart", "signal"):
                await self._lifecycle(req)
            else:
                await asyncio.to_thread(self._fs, req, reply)
        except fsops.FsError as exc:
            reply.code, reply.error = exc.code, exc.message
        except OSError as exc:
            reply.code, reply.error = 500, f"file system error: {exc.strerror}"
        try:  # the whole answer, sealed to the scheduler's one-time key
            box = sealbox.seal(req.reader_public, msgspec.msgpack.encode(reply), node_id.encode())
        except sealbox.SealError:
            return
        outer = wire.FsReply(node_id=node_id, secret="", sealed=box)
        with contextlib.suppress(Exception):
            await self.bus.nc.publish(msg.reply, msgspec.msgpack.encode(outer))

    async def fetch_secrets(self, alloc_id: str, task: str, paths: list[str]) -> dict[str, Any]:
        """A task's token and the secrets its templates read, from the scheduler, sealed to a
        key that lives only for this call."""
        runner = self.runners.get(alloc_id)
        node_id = runner.alloc["NodeID"] if runner is not None else self.node_ids[0]
        key = X25519PrivateKey.generate()
        reply = await self.rpc.request(
            self._subject(wire.TASK_SECRETS),
            wire.TaskSecretsRequest(
                node_id=node_id,
                secret=self.secrets[node_id],
                alloc_id=alloc_id,
                task=task,
                reader_public=key.public_key().public_bytes_raw(),
                paths=paths,
            ),
            wire.TaskSecretsReply,
            channel=wire.TASK_SECRETS,
            timeout=30.0,
        )
        try:
            plain = sealbox.open_sealed(key, reply.sealed, f"{alloc_id}/{task}".encode())
        except sealbox.SealError as exc:
            raise ServiceError(502, f"task secrets: {exc}") from None
        return msgspec.json.decode(plain)

    async def _lifecycle(self, req: wire.FsRequest) -> None:
        """Restart or signal an allocation's tasks (one task when named), in place."""
        runner = self.runners.get(req.alloc_id)
        if runner is None or runner.stopping:
            raise fsops.FsError(404, f"unknown allocation ID {req.alloc_id!r}")
        if req.task and req.task not in runner.tasks:
            raise fsops.FsError(400, f"Failed to {req.op} task: unknown task {req.task!r}")
        targets = [runner.tasks[req.task]] if req.task else list(runner.tasks.values())
        if req.op == "signal":
            name = req.signal or "SIGKILL"
            if not name.startswith("SIG") or not hasattr(signal, name):
                raise fsops.FsError(400, f'Failed to signal task: unknown signal "{name}"')
            done = [tr.signal(name) for tr in targets]
        else:
            done = await asyncio.gather(*(tr.restart() for tr in targets))
        if not any(done):
            raise fsops.FsError(400, f"Task not running: nothing to {req.op}")

    def _fs(self, req: wire.FsRequest, reply: wire.FsReply) -> None:
        runner = self.runners.get(req.alloc_id)
        alloc_dir = os.path.join(self.data_dir, "alloc", req.alloc_id)
        if not os.path.isdir(alloc_dir):
            raise fsops.FsError(404, f"unknown allocation ID {req.alloc_id!r}")
        if req.op == "ls":
            reply.files = fsops.ls(alloc_dir, req.path)
        elif req.op == "stat":
            reply.files = [fsops.stat(alloc_dir, req.path)]
        elif req.op == "readat":
            reply.data = fsops.read_at(alloc_dir, req.path, req.offset, req.limit)
        elif req.op == "stream":
            reply.data, reply.total = fsops.read_stream(
                alloc_dir, req.path, req.origin, req.offset, req.limit
            )
        elif req.op == "logs":
            # Dead before the read: then nothing the read missed can follow it.
            tr = runner.tasks.get(req.task) if runner is not None else None
            reply.task_dead = tr is None or tr.dead
            at = (req.log_file, req.offset)
            if req.log_file < 0:
                at = fsops.log_position(alloc_dir, req.task, req.stream, req.origin, req.offset)
            reply.frames, (reply.log_file, reply.log_offset), reply.total = fsops.read_logs_at(
                alloc_dir, req.task, req.stream, at, req.limit
            )
        else:
            raise fsops.FsError(400, f"unknown fs operation {req.op!r}")

    def _secrets_for(self, node_ids: Any) -> dict[str, str]:
        return {n: self.secrets[n] for n in node_ids if n in self.secrets}

    async def register(self) -> None:
        nodes = [{**n, "SecretID": self.secrets[nid]} for nid, n in self.nodes.items()]
        for i in range(0, len(nodes), 200):
            reply = await self._retry(
                lambda chunk=nodes[i : i + 200]: self.rpc.request(
                    self._subject(wire.NODE_REGISTER),
                    wire.NodeRegister(nodes=chunk),
                    wire.NodeRegistered,
                    channel=wire.NODE_REGISTER,
                    timeout=15.0,
                )
            )
            self.heartbeat_ttl = reply.heartbeat_ttl

    async def _retry(self, call: Any) -> Any:
        delay = 0.1
        while True:
            try:
                return await call()
            except ServiceError as exc:
                if exc.code not in (503, 504) or self._stopping:
                    raise
                await asyncio.sleep(delay)  # no scheduler replica yet: back off
                delay = min(delay * 2, 2.0)

    async def _heartbeat_loop(self) -> None:
        ids = self.node_ids
        while not self._stopping:
            if self.heartbeating:
                for i in range(0, len(ids), 2000):
                    with contextlib.suppress(Exception):
                        chunk = ids[i : i + 2000]
                        await self.rpc.publish(
                            self._subject(wire.HEARTBEAT),
                            wire.Heartbeat(node_ids=chunk, secrets=self._secrets_for(chunk)),
                            channel=wire.HEARTBEAT,
                        )
            await asyncio.sleep(max(self.heartbeat_ttl / 4, 0.05))

    async def _repoll(self, _msg: Any = None) -> None:
        """A scheduler replica started or the bus reconnected: the poll in flight may be held
        by a replica that died, or lost, and would wait out its timeout; poll again now (the
        index only moves on a reply, so nothing is missed)."""
        if self._poll is not None:
            self._poll.cancel()

    async def _poll_loop(self) -> None:
        while not self._stopping:
            call = self._poll = asyncio.create_task(
                self.rpc.request(
                    self._subject(wire.NODE_ALLOCS),
                    wire.NodeAllocs(
                        node_ids=self.node_ids, index=self.index, wait=10.0, secrets=self.secrets
                    ),
                    wire.NodeAllocsReply,
                    channel=wire.NODE_ALLOCS,
                    timeout=20.0,
                )
            )
            try:
                await asyncio.wait([call])
            finally:
                call.cancel()  # stop() cancels this loop: the call ends with it
            if call.cancelled():
                continue
            try:
                reply = call.result()
            except ServiceError as exc:
                log.debug("alloc poll failed", error=exc.message)
                if exc.code == 403:
                    await self._reregister()
                await asyncio.sleep(0.2)
                continue
            self.index = reply.index
            for a in reply.allocs:
                await self._apply(a, reply.groups)

    async def _reregister(self) -> None:
        """The scheduler does not know our nodes (its state was reset): register again, as a
        Nomad client does; refused when another node holds our ID with another secret."""
        try:
            await self.register()
        except ServiceError as exc:
            log.warning("node registration refused", error=exc.message)
            await asyncio.sleep(2.0)

    async def _apply(self, alloc: dict[str, Any], groups: dict[str, Any]) -> None:
        if self._stopping:
            return  # a poll answered during stop() must not start what stop() won't kill
        runner = self.runners.get(alloc["ID"])
        stop = alloc["DesiredStatus"] != "run" or alloc["ClientStatus"] == "lost"
        if runner is None:
            if stop or alloc["ClientStatus"] in ("complete", "failed"):
                return
            gkey = (
                f"{alloc['Namespace']}\x00{alloc['JobID']}\x00{alloc['JobVersion']}"
                f"\x00{alloc['TaskGroup']}"
            )
            info = groups.get(gkey) or {}
            runner = AllocRunner(
                alloc,
                info.get("Group") or {},
                info.get("JobType", ""),
                self.nodes.get(alloc["NodeID"], {}),
                self.drivers,
                self.data_dir,
                self._queue_update,
                JobInfo(
                    id=alloc["JobID"],
                    name=str(info.get("JobName") or alloc["JobID"]),
                    parent_id=str(info.get("ParentID") or ""),
                    region=str(info.get("Region") or "global"),
                    meta=info.get("Meta") or {},
                    payload=_payload(info.get("Payload")),
                ),
                fetch=self.fetch_secrets,
                users=self.cfg.task_users,
            )
            self.runners[alloc["ID"]] = runner
            runner.start()
        elif stop:
            task = asyncio.create_task(runner.stop())
            self._stops.add(task)
            task.add_done_callback(self._stops.discard)
        else:
            runner.alloc = {**runner.alloc, **alloc}

    def _queue_update(self, alloc_id: str, update: dict[str, Any]) -> None:
        # Coalesce: only the latest state of each allocation is sent.
        prev = self._pending.get(alloc_id)
        if prev is not None and "DeploymentStatus" in prev and "DeploymentStatus" not in update:
            update["DeploymentStatus"] = prev["DeploymentStatus"]
        self._pending[alloc_id] = update
        self._flush.set()

    async def _flush_loop(self) -> None:
        while not self._stopping:
            await self._flush.wait()
            await asyncio.sleep(FLUSH_EVERY)  # batch what arrives meanwhile
            self._flush.clear()
            await self.flush()

    async def flush(self) -> None:
        pending, self._pending = self._pending, {}
        items = list(pending.values())
        for i in range(0, len(items), UPDATE_BATCH):
            chunk = items[i : i + UPDATE_BATCH]
            nodes = {
                self.runners[u["ID"]].alloc["NodeID"] for u in chunk if u["ID"] in self.runners
            }
            try:
                await self.rpc.request(
                    self._subject(wire.ALLOC_UPDATE),
                    wire.AllocUpdate(updates=chunk, secrets=self._secrets_for(nodes)),
                    wire.Ok,
                    channel=wire.ALLOC_UPDATE,
                    timeout=15.0,
                )
            except ServiceError as exc:
                log.warning("alloc update failed; will retry", error=exc.message)
                for u in chunk:
                    self._pending.setdefault(u["ID"], u)
                self._flush.set()

    async def crash(self) -> None:
        """Behave like a node that died: no more heartbeats, polls or updates (tests use this
        to see allocations rescheduled elsewhere). Its processes are killed silently."""
        self.heartbeating = False
        self._pending.clear()
        await self.stop(kill_tasks=True, report=False)

    async def stop(self, *, kill_tasks: bool = True, report: bool = True) -> None:
        self.ready = False
        self._stopping = True
        for t in self._tasks:
            t.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5)
        if kill_tasks:
            # Runners already stopping (the scheduler stopped them) are waited for as well.
            runners = list(self.runners.values())
            await asyncio.gather(*(r.stop() for r in runners), return_exceptions=True)
        if report:
            with contextlib.suppress(Exception):
                await self.flush()
        else:
            self._pending.clear()


def _payload(raw: Any) -> bytes:
    if not isinstance(raw, str) or not raw:
        return b""
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        return b""  # the scheduler checked it at dispatch: nothing else to write


async def run_client(
    bus: Bus,
    settings: Settings,
    *,
    datacenter: str = "dc1",
    simulate: int = 0,
    node_pool: str = "default",
    name: str = "",
    drivers: tuple[str, ...] = ("raw_exec", "mock"),
    data_dir: str = "",
) -> ClientAgent:
    """Start a client agent (`simulate` > 0: that many mock-driver nodes in this process)."""
    cfg = NodeConfig(
        name=name,
        datacenter=datacenter,
        node_pool=node_pool,
        drivers=drivers if not simulate else ("mock",),
        data_dir=data_dir,
        task_users=TaskUsers(settings.client_task_user, settings.client_allow_root_tasks),
    )
    agent = ClientAgent(bus, settings, cfg, simulate=simulate)
    await agent.start()
    return agent
