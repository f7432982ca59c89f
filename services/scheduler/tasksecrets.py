"""Secrets for tasks (Nomad's Vault integration, against Trellis's own secrets service): a task
with `vault { policies = [...] }` gets a token scoped to those policies, created through the
secrets API (sealed end to end, shared/api_session.py) with the credential the scheduler holds
for this purpose (TRELLIS_SCHEDULER_SECRETS_TOKEN, allowed to create tokens under one token
role), never a root token. Tokens are renewed while their allocation runs and revoked when it
stops. The client node asks for them over the bus, authenticated by its node secret, and gets
them sealed to a key only it holds (sealbox). Token values live only in this process's memory:
never in the log, an evaluation or the allocation."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from dataclasses import dataclass
from typing import Any

import msgspec
import structlog

from services.scheduler import nodeauth, sealbox, wire
from services.scheduler.state.fsm import SchedulerFSM
from services.scheduler.state.tables import alloc_terminal
from services.scheduler.variables import workload
from shared.bus import Bus, CallContext
from shared.errors import ServiceError
from shared.messages import HttpRequest
from shared.sealing import Keys
from shared.settings import Settings
from shared.subjects import API_SECRETS

log = structlog.get_logger("scheduler.tasksecrets")

RENEW_EVERY = 60.0  # seconds; TRELLIS_SCHEDULER_TASK_TOKEN_RENEW overrides it
TOKEN_PERIOD = "30m"  # the role's period: a token of a dead scheduler replica lapses soon
CALL_TIMEOUT = 15.0


def vault_block(task: dict[str, Any]) -> dict[str, Any] | None:
    """The task's vault block (JSON `Vault`, or the HCL decoder's raw `Svc`), keys normalised."""
    raw = task.get("Vault") or task.get("Svc")
    if not isinstance(raw, dict):
        return None
    low = {str(k).lower().replace("_", ""): v for k, v in raw.items()}
    policies = low.get("policies") or []
    if not isinstance(policies, list) or not all(isinstance(p, str) for p in policies):
        return None
    env = low.get("env")
    return {
        "Policies": policies,
        "Env": True if env is None else bool(env),
        "ChangeMode": str(low.get("changemode") or "restart"),
        "ChangeSignal": str(low.get("changesignal") or ""),
    }


def _seconds(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, "") or default)
    except ValueError:
        log.warning("ignoring an invalid number of seconds", variable=name)
        return default
    return value if value > 0 else default


@dataclass
class Issued:
    token: str
    accessor: str
    node_id: str


class TaskSecrets:
    def __init__(self, bus: Bus, settings: Settings, fsm: SchedulerFSM) -> None:
        self.bus = bus
        self.cluster = settings.cluster_name
        self.fsm = fsm
        self.token = os.environ.get("TRELLIS_SCHEDULER_SECRETS_TOKEN", "")
        self.role = os.environ.get("TRELLIS_SCHEDULER_SECRETS_ROLE", "trellis-tasks")
        self.renew_every = _seconds("TRELLIS_SCHEDULER_TASK_TOKEN_RENEW", RENEW_EVERY)
        self.issued: dict[tuple[str, str], Issued] = {}  # (alloc, task) -> token
        self._channel: Any = None
        self._settings = settings
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self.keys: Keys | None = None  # data keys for Variables' nomadVar reads (service.py)

    @property
    def enabled(self) -> bool:
        return bool(self.token)

    async def start(self) -> None:
        # `handle` is served by service.py on the nodes' sealed channel (shared/api_session.py):
        # the request carries the node's secret.
        self.fsm.on_apply.append(self._on_apply)
        self._task = asyncio.create_task(self._renew_loop())

    async def stop(self) -> None:
        task, self._task = self._task, None  # the loop checks it: a cancel may be swallowed
        if task is not None:
            task.cancel()
            await asyncio.wait([task], timeout=5)

    # -- the secrets API

    async def _call(self, method: str, path: str, token: str, body: Any = None) -> Any:
        if self._channel is None:
            from services.gateway.secure import service_channel

            self._channel = service_channel(self.bus, self._settings, "secrets", API_SECRETS)
        env = HttpRequest(
            method=method,
            path=path,
            headers={"x-vault-token": token, "content-type": "application/json"},
            body=json.dumps(body).encode() if body is not None else b"",
        )
        resp = await self._channel.call(env, timeout=CALL_TIMEOUT)
        data = json.loads(resp.body) if resp.body else {}
        if resp.status >= 400:
            errors = data.get("errors") if isinstance(data, dict) else None
            raise ServiceError(resp.status, "; ".join(errors or []) or f"status {resp.status}")
        return data

    async def _derive(self, alloc: dict[str, Any], task: dict[str, Any]) -> Issued:
        key = (alloc["ID"], task["Name"])
        async with self._lock:
            got = self.issued.get(key)
            if got is not None:
                return got
            vb = vault_block(task) or {"Policies": []}
            data = await self._call(
                "POST",
                f"/v1/auth/token/create/{self.role}",
                self.token,
                {
                    "policies": vb["Policies"],
                    "display_name": f"task-{task['Name']}",
                    "meta": {
                        "AllocationID": alloc["ID"],
                        "Task": task["Name"],
                        "NodeID": alloc["NodeID"],
                        "JobID": alloc["JobID"],
                    },
                },
            )
            auth = data.get("auth") or {}
            got = Issued(auth["client_token"], auth["accessor"], alloc["NodeID"])
            self.issued[key] = got
            return got

    # -- the client's request

    async def handle(self, req: wire.TaskSecretsRequest, _: CallContext) -> wire.TaskSecretsReply:
        t = self.fsm.t
        node = t.nodes.get(req.node_id)
        if not nodeauth.matches(node, req.secret):
            raise ServiceError(403, nodeauth.PERMISSION_DENIED)
        alloc = t.allocs.get(req.alloc_id)
        if alloc is None or alloc["NodeID"] != req.node_id or alloc_terminal(alloc):
            raise ServiceError(404, "allocation not running on this node")
        job = t.job_version(alloc["Namespace"], alloc["JobID"], alloc["JobVersion"]) or {}
        group = next(
            (g for g in job.get("TaskGroups") or [] if g["Name"] == alloc["TaskGroup"]), {}
        )
        task = next((x for x in group.get("Tasks") or [] if x["Name"] == req.task), None)
        # Templates' `nomadVar` reads need no vault block (services/scheduler/variables).
        var_refs = [p for p in req.paths if p.startswith(workload.VAR_PREFIX)][:32]
        req.paths = [p for p in req.paths if not p.startswith(workload.VAR_PREFIX)]
        if task is not None and vault_block(task) is None and var_refs and not req.paths:
            found = await workload.read_for_task(t, self.keys, alloc, req.task, var_refs)
            plain = msgspec.json.encode({"token": "", "secrets": found})
            try:
                box = sealbox.seal(req.reader_public, plain, f"{req.alloc_id}/{req.task}".encode())
            except sealbox.SealError as exc:
                raise ServiceError(400, str(exc)) from None
            return wire.TaskSecretsReply(sealed=box)
        if task is None or vault_block(task) is None:
            raise ServiceError(400, f"task {req.task!r} has no vault block")
        if not self.enabled:
            raise ServiceError(503, "the scheduler holds no credential for the secrets service")
        try:
            issued = await self._derive(alloc, task)
            values: dict[str, Any] = {}
            for path in req.paths[:32]:
                clean = path.strip("/")
                if not clean or ".." in clean.split("/"):
                    continue
                try:
                    values[path] = await self._call("GET", f"/v1/{clean}", issued.token)
                except ServiceError as exc:
                    if exc.code not in (403, 404):
                        raise
                    values[path] = None  # consul-template skips a missing secret's block
        except ServiceError as exc:
            log.warning("task secrets failed", alloc=req.alloc_id, task=req.task, code=exc.code)
            raise ServiceError(502 if exc.code >= 500 else exc.code, exc.message) from None
        values.update(await workload.read_for_task(t, self.keys, alloc, req.task, var_refs))
        plain = msgspec.json.encode({"token": issued.token, "secrets": values})
        aad = f"{req.alloc_id}/{req.task}".encode()
        try:
            box = sealbox.seal(req.reader_public, plain, aad)
        except sealbox.SealError as exc:
            raise ServiceError(400, str(exc)) from None
        return wire.TaskSecretsReply(sealed=box)

    # -- lifetime

    def _on_apply(self, _index: int) -> None:
        if not self.issued:
            return
        done = [
            k
            for k in self.issued
            if (a := self.fsm.t.allocs.get(k[0])) is None or alloc_terminal(a)
        ]
        for key in done:
            issued = self.issued.pop(key)
            asyncio.get_event_loop().create_task(self._revoke(issued))

    async def _revoke(self, issued: Issued) -> None:
        try:
            await self._call(
                "POST", "/v1/auth/token/revoke-accessor", self.token, {"accessor": issued.accessor}
            )
        except Exception as exc:  # the period ends it anyway
            log.warning("task token revoke failed", error=str(exc))

    async def _renew_loop(self) -> None:
        while self._task is not None:
            await asyncio.sleep(self.renew_every)
            if self.enabled:  # our own credential is periodic too
                with contextlib.suppress(Exception):
                    await self._call("POST", "/v1/auth/token/renew-self", self.token, {})
            for issued in list(self.issued.values()):
                try:
                    await self._call(
                        "POST", "/v1/auth/token/renew", self.token, {"token": issued.token}
                    )
                except Exception as exc:
                    log.warning("task token renew failed", error=str(exc))
