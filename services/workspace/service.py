"""The workspace service process: the replicated log with its state machine, the leader lease
for snapshots, and the HTTP API served over the bus."""

from __future__ import annotations

import contextlib
import datetime as dt
import hmac
import os
import uuid

import structlog
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import BadRequestError, BucketNotFoundError
from nats.js.kv import KeyValue

from services.workspace.blobs import BlobStore
from services.workspace.context import Req
from services.workspace.executor import RunExecutor, public_url
from services.workspace.handlers.accounts import digest
from services.workspace.jsonapi import ApiError
from services.workspace.permissions import ADMIN_USER_ID, Caller
from services.workspace.query import parse_query
from services.workspace.routes import Router
from services.workspace.sealing import Keys, bus_fetch
from services.workspace.state import WorkspaceState
from shared.api_session import serve_api
from shared.bus import Bus, CallContext
from shared.leader import LeaderLease
from shared.messages import HttpRequest, HttpResponse
from shared.replog import ApplyError, ReplicatedLog
from shared.service_identity import load_service_key
from shared.settings import Settings
from shared.subjects import API_WORKSPACE

log = structlog.get_logger("workspace")

ADMIN_TOKEN_ENV = "TRELLIS_WORKSPACE_ADMIN_TOKEN"


class WorkspaceService:
    name = "workspace"

    def __init__(
        self,
        bus: Bus,
        settings: Settings,
        *,
        admin_token: str | None = None,
        snapshot_every: int = 1000,
    ) -> None:
        self.bus = bus
        self.settings = settings
        # The bootstrap site-admin token (`trellis dev` passes its root token this way).
        self.admin_token = (
            admin_token if admin_token is not None else os.environ.get(ADMIN_TOKEN_ENV, "")
        )
        self.state = WorkspaceState()
        self.router = Router()
        self.snapshot_every = snapshot_every
        self.log: ReplicatedLog | None = None
        self.lease: LeaderLease | None = None
        # This replica's identity (shared/service_identity.py): the gateway and the secrets
        # service (data keys) check it.
        self.service_key = load_service_key(settings, "workspace")
        self.keys = Keys(bus_fetch(bus, settings.cluster_name, self.service_key))
        self.blobs = BlobStore(
            bus.nc.jetstream(), f"{settings.cluster_name}_workspace_states", settings.replicas
        )
        self.executor: RunExecutor | None = None
        self._ready = False

    @property
    def ready(self) -> bool:
        return self._ready

    async def _kv(self, bucket: str) -> KeyValue:
        js = self.bus.nc.jetstream()
        try:
            return await js.key_value(bucket)
        except BucketNotFoundError:
            try:
                return await js.create_key_value(
                    KeyValueConfig(
                        bucket=bucket, storage=StorageType.FILE, replicas=self.settings.replicas
                    )
                )
            except BadRequestError:
                return await js.key_value(bucket)

    async def start(self) -> None:
        cluster = self.settings.cluster_name
        js = self.bus.nc.jetstream()
        kv = await self._kv(f"{cluster}_leases")
        self.lease = LeaderLease(kv, "workspace", f"workspace-{uuid.uuid4().hex[:8]}")
        lease = self.lease
        self.log = ReplicatedLog(
            js,
            f"{cluster}_workspace",
            self.state,
            replicas=self.settings.replicas,
            snapshot_every=self.snapshot_every,
            should_snapshot=lambda: lease.is_leader,
        )
        await self.log.start()
        await self.lease.start()
        # The API travels sealed end to end with the gateway (shared/api_session.py).
        await serve_api(
            self.bus,
            self.service_key,
            cluster,
            API_WORKSPACE,
            self.handle,
            concurrency=self.settings.concurrency,
        )
        # Remote runs: the leader submits plans and applies to the scheduler as jobs.
        self.executor = RunExecutor(
            self.bus, self.settings, self.state, self.log, lambda: lease.is_leader, self.blobs
        )
        self.executor.start()
        self._ready = True
        log.info("workspace service ready", index=self.log.applied_index)

    async def stop(self) -> None:
        self._ready = False
        if self.executor is not None:
            await self.executor.stop()
        if self.lease is not None:
            with contextlib.suppress(Exception):
                await self.lease.stop()
        if self.log is not None:
            await self.log.stop()

    def authenticate(self, headers: dict[str, str]) -> Caller | None:
        auth = headers.get("authorization", "")
        scheme, _, token = auth.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return None
        if self.admin_token and hmac.compare_digest(token.encode(), self.admin_token.encode()):
            return Caller(kind="admin", user_id=ADMIN_USER_ID)
        # Lookup by SHA-256 digest: no secret-dependent comparison happens on the raw token.
        tid = self.state.token_by_digest.get(digest(token))
        tok = self.state.tokens.get(tid) if tid else None
        if tok is None:
            return None
        if tok.expired_at:
            exp = dt.datetime.fromisoformat(tok.expired_at.replace("Z", "+00:00"))
            if exp <= dt.datetime.now(dt.UTC):
                return None
        if tok.kind == "user":
            return Caller(kind="user", user_id=tok.owner_id, token_id=tok.id)
        if tok.kind == "team":
            team = self.state.teams.get(tok.owner_id)
            return Caller(
                kind="team",
                team_id=tok.owner_id,
                org_id=team.org_id if team else None,
                token_id=tok.id,
            )
        if tok.kind == "run":
            ws = self.state.workspaces.get(tok.owner_id)
            if ws is None:
                return None
            return Caller(
                kind="run",
                org_id=ws.org_id,
                workspace_id=ws.id,
                run_id=tok.description,
                token_id=tok.id,
            )
        return Caller(kind="organization", org_id=tok.owner_id, token_id=tok.id)

    async def handle(self, req: HttpRequest, ctx: CallContext) -> HttpResponse:
        try:
            return await self._dispatch(req)
        except ApiError as exc:
            return exc.response()
        except ApplyError as exc:
            return ApiError(exc.code, exc.message).response()
        except Exception:
            log.exception("workspace handler failed", method=req.method, path=req.path)
            return ApiError(500, "internal error").response()

    async def _dispatch(self, req: HttpRequest) -> HttpResponse:
        assert self.log is not None
        method = req.method.upper()
        handler, params, extra = self.router.match(method, req.path)
        if handler is None:
            if extra:
                raise ApiError(
                    405, f"{method} is not allowed here; allowed: {', '.join(sorted(set(extra)))}"
                )
            raise ApiError(404, "no such endpoint")
        assert params is not None
        r = Req(
            http=req,
            params=params,
            query=parse_query(req.query),
            state=self.state,
            log=self.log,
            keys=self.keys,
            blobs=self.blobs,
            extra={"public_url": public_url(self.settings)},
        )
        if extra:  # the route needs a token
            # Consistent reads: everything written before this request is applied first.
            await self.log.barrier()
            r.caller = self.authenticate(req.headers)
            if r.caller is None:
                raise ApiError(401, "a valid API token is required (Authorization: Bearer <token>)")
        return await handler(r)
