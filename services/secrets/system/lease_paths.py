"""sys/leases: lookup, renew, revoke, revoke-prefix, revoke-force, and listing."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from services.secrets.core.wrapping import rfc3339
from services.secrets.errors import bad_request, not_found
from services.secrets.framework.fields import Duration
from services.secrets.framework.path import Op, Operation, Path, write
from services.secrets.framework.request import Request, Response

if TYPE_CHECKING:
    from services.secrets.core.core import Core
    from services.secrets.core.expiration import LeaseEntry


class LeaseFields(msgspec.Struct, kw_only=True):
    lease_id: str = ""
    url_lease_id: str = ""
    increment: Duration = 0
    sync: bool = True


class PrefixFields(msgspec.Struct, kw_only=True):
    prefix: str = ""
    sync: bool = True


def paths(core: Core) -> list[Path]:
    async def _lease(req: Request, lease_id: str) -> LeaseEntry:
        if not lease_id:
            raise bad_request("lease_id is required")
        lease = await core.expiration.get(lease_id)
        if lease is None or lease.namespace_id != req.namespace.id:
            raise bad_request("invalid lease")
        return lease

    async def lookup(req: Request, f: LeaseFields) -> Response:
        lease = await _lease(req, f.lease_id or f.url_lease_id)
        import time as _t

        return Response(
            data={
                "id": lease.lease_id,
                "issue_time": rfc3339(lease.issue_time),
                "expire_time": rfc3339(lease.expire_time),
                "last_renewal": rfc3339(lease.last_renewal) if lease.last_renewal else None,
                "renewable": lease.renewable,
                "ttl": max(0, int(lease.expire_time - _t.time())),
            }
        )

    async def list_leases(req: Request, f: PrefixFields) -> Response:
        # Vault lists `prefix/` when the prefix lacks its slash; storage wants folders.
        prefix = f.prefix if not f.prefix or f.prefix.endswith("/") else f.prefix + "/"
        keys = await core.expiration.list_prefix(prefix)
        if not keys:
            raise not_found()
        return Response(data={"keys": keys})

    async def renew(req: Request, f: LeaseFields) -> Response:
        lease = await _lease(req, f.lease_id or f.url_lease_id)
        if not lease.renewable:
            raise bad_request("lease is not renewable")
        lease = await core.expiration.renew(lease, f.increment)
        import time as _t

        return Response(
            extra={
                "lease_id": lease.lease_id,
                "renewable": True,
                "lease_duration": max(0, int(lease.expire_time - _t.time())),
            }
        )

    async def revoke(req: Request, f: LeaseFields) -> Response:
        lease = await _lease(req, f.lease_id or f.url_lease_id)
        await core.expiration.revoke(lease)
        return Response()

    def revoke_prefix(force: bool):  # type: ignore[no-untyped-def]
        async def handler(req: Request, f: PrefixFields) -> Response:
            await core.expiration.revoke_prefix(f.prefix, force=force)
            return Response()

        return handler

    return [
        Path(
            "leases/lookup",
            write(lookup, "Look up a lease"),
            LeaseFields,
            synopsis="Read a lease's times.",
        ),
        Path(
            ("leases/lookup/", "leases/lookup/{prefix*}"),
            {Op.LIST: Operation(list_leases, "List leases", sudo=True)},
            PrefixFields,
            synopsis="List lease ids under a prefix.",
        ),
        Path(
            ("leases/renew", "leases/renew/{url_lease_id*}", "renew", "renew/{url_lease_id*}"),
            write(renew, "Renew a lease"),
            LeaseFields,
            synopsis="Renew a lease.",
        ),
        Path(
            ("leases/revoke", "leases/revoke/{url_lease_id*}", "revoke", "revoke/{url_lease_id*}"),
            write(revoke, "Revoke a lease"),
            LeaseFields,
            synopsis="Revoke a lease.",
        ),
        Path(
            ("leases/revoke-prefix/{prefix*}", "revoke-prefix/{prefix*}"),
            write(revoke_prefix(False), "Revoke leases under a prefix", sudo=True),
            PrefixFields,
            synopsis="Revoke every lease under a prefix.",
        ),
        Path(
            ("leases/revoke-force/{prefix*}", "revoke-force/{prefix*}"),
            write(revoke_prefix(True), "Forget leases under a prefix", sudo=True),
            PrefixFields,
            synopsis="Revoke leases under a prefix, ignoring backend errors.",
        ),
    ]
