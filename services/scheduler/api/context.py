"""What every handler needs: the state, the log to write through, and the ACL check."""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Any

import msgspec

from services.scheduler.acl import Acl, acl_for
from services.scheduler.api.http import HttpError, Request
from services.scheduler.members import Membership
from services.scheduler.state.fsm import SchedulerFSM
from services.scheduler.state.tables import Tables
from shared.replog import ApplyError, ReplicatedLog
from shared.sealing import Keys
from shared.service_identity import ServiceKey

PERMISSION_DENIED = "Permission denied"
TOKEN_NOT_FOUND = "ACL token not found"


@dataclass
class ApiContext:
    fsm: SchedulerFSM
    replog: ReplicatedLog
    acl_enabled: bool = False
    management_token: str = ""
    region: str = "global"
    datacenter: str = "dc1"
    advertise: str = "127.0.0.1:4647"
    # The scheduler server's own data dir (its acl-bootstrap-reset file); "" for none.
    server_dir: str = ""
    # The bus and cluster name, to ask a client node for an allocation's files (api/fs.py).
    bus: Any = None
    cluster: str = ""
    # The scheduler's service key: signs its requests to client nodes (api/fs.py).
    service_key: ServiceKey | None = None
    # Data keys from the secrets barrier (Variables are sealed under them); None: unavailable.
    keys: Keys | None = None
    # The mesh's view of its scheduler servers (agent, status and raft endpoints).
    members: Membership | None = None

    @property
    def t(self) -> Tables:
        return self.fsm.t

    async def append(self, kind: str, payload: dict[str, Any]) -> tuple[int, Any]:
        try:
            data = msgspec.msgpack.encode(payload)
        except OverflowError:
            # A client number beyond 64 bits (Nomad's ints are int64/uint64): bad input.
            raise HttpError(400, "Failed to decode request body: number out of range") from None
        try:
            return await self.replog.append(kind, data)
        except ApplyError as exc:
            raise HttpError(exc.code, exc.message) from None

    # -- ACLs

    async def record_configured_bootstrap(self) -> None:
        """A management token in the configuration is the ACL bootstrap: put that in the log
        (once; replicas racing to do it agree through the log) before anyone may bootstrap."""
        if self.acl_enabled and self.management_token and not self.t.acl_bootstrap_index:
            await self.append("acl.bootstrap", {"configured": True})

    @staticmethod
    def token_of(req: Request) -> str:
        h = req.headers
        tok = h.get("x-sched-token") or h.get("x-nomad-token") or ""
        if not tok:
            auth = h.get("authorization", "")
            if auth.lower().startswith("bearer "):
                tok = auth[7:].strip()
        return tok

    def is_configured_management(self, secret: str) -> bool:
        return bool(
            self.management_token
            and secret
            and hmac.compare_digest(secret.encode(), self.management_token.encode())
        )

    def resolve(self, req: Request) -> Acl:
        if not self.acl_enabled:
            return Acl(management=True)
        secret = self.token_of(req)
        if self.is_configured_management(secret):
            return Acl(management=True)
        if not secret:
            anon = self.t.acl_policies.get("anonymous")
            return acl_for(
                {"Type": "client", "Policies": ["anonymous"]} if anon else None, self.t.acl_policies
            )
        accessor = self.t.token_by_secret.get(secret)
        if accessor is None:
            raise HttpError(403, TOKEN_NOT_FOUND)
        token = self.t.acl_tokens[accessor]
        return acl_for(token, self.t.acl_policies)

    def require_ns(self, req: Request, namespace: str, *caps: str) -> Acl:
        """Any one of `caps` in `namespace` is enough."""
        acl = self.resolve(req)
        if not any(acl.allow_ns(namespace, c) for c in caps):
            raise HttpError(403, PERMISSION_DENIED)
        return acl

    def require(self, req: Request, area: str, write: bool) -> Acl:
        acl = self.resolve(req)
        if not acl.allow_level(area, write):
            raise HttpError(403, PERMISSION_DENIED)
        return acl

    def require_management(self, req: Request) -> Acl:
        acl = self.resolve(req)
        if not acl.management:
            raise HttpError(403, PERMISSION_DENIED)
        return acl
