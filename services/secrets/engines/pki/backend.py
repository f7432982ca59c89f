"""The PKI backend: wires the path modules to one mount's storage and to the crypto workers."""

from __future__ import annotations

from typing import Any

from services.crypto.client import crypto_call
from services.crypto.shared_args import SharedArgs
from services.secrets.engines.pki import (
    ca,
    certs,
    crl,
    fetch,
    issue,
    issuers,
    keys,
    revoke,
    roles,
    sign,
    tidy,
    urls,
)
from services.secrets.engines.pki.cache import ConfigCache
from services.secrets.engines.pki.roles import Role
from services.secrets.errors import SecretsError, bad_request
from services.secrets.framework.backend import Backend, Routed, SecretType
from services.secrets.framework.path import Op, Path
from services.secrets.framework.request import Request, Response
from shared.errors import ServiceError

# Per attempt; crypto_call retries on another worker when a worker vanishes. Generous because a
# request may queue behind others on a busy worker (tests lower it to exercise worker loss).
CALL_TIMEOUT = 30.0
SLOW_CALL_TIMEOUT = 120.0  # RSA-4096 key generation


class PKIBackend(Backend):
    type_name = "pki"
    help_text = (
        "The PKI engine issues X.509 certificates: generate or import issuers (CAs), define "
        "roles, then issue (new key) or sign (your CSR) under a role; revoke and publish CRLs."
    )

    tidier: tidy.Tidier

    def build_paths(self) -> list[Path]:
        self.cfg = ConfigCache(self.storage)
        self.issuers = issuers.IssuerStore(self)
        self.crls = crl.CrlManager(self)
        self.secret_types[certs.SECRET_TYPE] = SecretType(revoke=self._revoke_lease)
        return [
            *roles.paths(self),
            *ca.paths(self),
            *issuers.paths(self),
            *keys.paths(self),
            *issue.paths(self),
            *sign.paths(self),
            *revoke.paths(self),
            *crl.paths(self),
            *fetch.paths(self),
            *urls.paths(self),
            *tidy.paths(self),
        ]

    async def cleanup(self) -> None:
        await self.tidier.stop()  # the mount is going away: stop a tidy still running on it

    async def call(self, routed: Routed, op: Op, req: Request, fields: Any) -> Response:
        await self.cfg.refresh()  # one read tells whether this replica's cache is current
        return await super().call(routed, op, req, fields)

    async def crypto(
        self, op: str, args: dict[str, Any], *, slow: bool = False, shared: SharedArgs | None = None
    ) -> Any:
        """Run one crypto op on a worker (`args` over `shared`, services/crypto/shared_args.py);
        its refusals become 400s naming the problem."""
        timeout = SLOW_CALL_TIMEOUT if slow else CALL_TIMEOUT
        try:
            return await crypto_call(
                self.core.bus,
                self.core.settings.cluster_name,
                op,
                args,
                timeout=timeout,
                shared=shared,
            )
        except ServiceError as exc:
            if exc.code == 400:
                raise bad_request(exc.message) from None
            raise SecretsError(exc.code, exc.message) from None

    async def get_role(self, name: str) -> Role | None:
        return await self.cfg.get_obj(f"role/{name}", Role)

    async def require_role(self, name: str) -> Role:
        role = await self.get_role(name)
        if role is None:
            raise bad_request(f"unknown role: {name}")
        return role

    def mount_ttls(self) -> tuple[int, int]:
        """(default, max) lease TTL of this mount, falling back to the system's."""
        cfg = self.mount.config if self.mount is not None else None
        return self.core.tokens.ttl_limits(
            cfg.default_lease_ttl if cfg else 0, cfg.max_lease_ttl if cfg else 0
        )

    async def _revoke_lease(self, internal: dict[str, Any]) -> None:
        serial = internal.get("serial_number", "")
        if serial:
            await self.cfg.refresh()
            await revoke.revoke_serial(self, serial, quiet=True)
