"""sys/leases: lookup, renew, revoke, revoke-prefix, revoke-force, and listing, as OpenBao
answers them. Leases of tokens (`auth/<mount>/login/...`, `auth/token/create/...`) are listed,
looked up and revoked like any other; revoking one revokes the token and its children."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import msgspec

from services.secrets.core.wrapping import rfc3339
from services.secrets.errors import SecretsError, bad_request, not_found
from services.secrets.framework.fields import Duration
from services.secrets.framework.path import Op, Operation, Path, write
from services.secrets.framework.request import RawResponse, Request, Response

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


def accepted() -> Response:
    """OpenBao answers an asynchronous revocation (sync=false) 202 with no body."""
    return Response(raw=RawResponse(202, b"", "application/json"))


def lookup_data(lease: LeaseEntry, now: float) -> dict[str, Any]:
    return {
        "id": lease.lease_id,
        "path": lease.path,
        "issue_time": rfc3339(lease.issue_time),
        "expire_time": rfc3339(lease.expire_time) if lease.expire_time else None,
        "last_renewal": rfc3339(lease.last_renewal) if lease.last_renewal else None,
        "renewable": lease.renewable,
        "ttl": max(0, int(lease.expire_time - now)) if lease.expire_time else 0,
    }


def paths(core: Core) -> list[Path]:
    def _lease_id(f: LeaseFields) -> str:
        lease_id = f.lease_id or f.url_lease_id
        if not lease_id:
            raise bad_request("lease_id must be specified")
        return lease_id

    async def _find(req: Request, lease_id: str) -> LeaseEntry | None:
        """A lease of the request's namespace or of one below it (as OpenBao); never one of
        a parent or a sibling."""
        lease = await core.expiration.get(lease_id)
        ns = None if lease is None else core.namespaces.by_id.get(lease.namespace_id)
        if ns is None or not ns.path.startswith(req.namespace.path):
            return None
        return lease

    async def lookup(req: Request, f: LeaseFields) -> Response:
        lease = await _find(req, _lease_id(f))
        if lease is None:
            raise bad_request("invalid lease")
        return Response(data=lookup_data(lease, time.time()))

    async def list_leases(req: Request, f: PrefixFields | LeaseFields) -> Response:
        # LIST leases/lookup (no slash, LeaseFields) is the root of the tree. Vault lists
        # `prefix/` when the prefix lacks its slash; storage wants folders.
        given = f.prefix if isinstance(f, PrefixFields) else ""
        prefix = given if not given or given.endswith("/") else given + "/"
        keys = await core.expiration.list_prefix(prefix, req.namespace.id)
        if not keys:
            raise not_found()
        return Response(data={"keys": keys})

    async def renew(req: Request, f: LeaseFields) -> Response:
        lease = await _find(req, _lease_id(f))
        if lease is None:
            raise bad_request("lease not found")
        if not lease.renewable:
            raise bad_request("lease is not renewable")
        if lease.auth:
            # OpenBao: a token's lease is renewed through auth/token/renew*, never here.
            raise bad_request("tokens cannot be renewed through this endpoint")
        lease = await core.expiration.renew(lease, f.increment)
        return Response(
            extra={
                "lease_id": lease.lease_id,
                "renewable": True,
                "lease_duration": max(0, int(lease.expire_time - time.time())),
            }
        )

    async def revoke(req: Request, f: LeaseFields) -> Response:
        lease = await _find(req, _lease_id(f))
        if lease is not None:  # an unknown lease is already revoked: 204, as OpenBao
            await core.expiration.revoke(lease)
        return Response() if f.sync else accepted()

    def revoke_prefix(force: bool):  # type: ignore[no-untyped-def]
        async def handler(req: Request, f: PrefixFields) -> Response:
            # Vault's core refuses every write to a path ending in '/' (its CLI strips the
            # slash of `-prefix auth/x/` before sending); answering 204 would claim a
            # revocation that never ran.
            if req.path.endswith("/"):
                raise bad_request("cannot write to a path ending in '/'")
            try:
                await core.expiration.revoke_prefix(
                    f.prefix, force=force, namespace_id=req.namespace.id
                )
            except SecretsError:
                raise
            except Exception:
                raise bad_request(
                    f"failed to revoke the leases under {f.prefix!r}: the backend refused; "
                    "revoke-force forgets them"
                ) from None
            return Response() if (f.sync or force) else accepted()

        return handler

    list_op = {Op.LIST: Operation(list_leases, "List leases", sudo=True)}
    return [
        Path(
            "leases/lookup",
            {**write(lookup, "Look up a lease"), **list_op},
            LeaseFields,
            synopsis="Read a lease's times; LIST the root of the lease tree.",
        ),
        Path(
            ("leases/lookup/", "leases/lookup/{prefix*}"),
            list_op,
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
            synopsis="Revoke a lease; a token's lease revokes the token and its children.",
        ),
        Path(
            ("leases/revoke-prefix/{prefix*}", "revoke-prefix/{prefix*}"),
            write(revoke_prefix(False), "Revoke leases under a prefix", sudo=True),
            PrefixFields,
            synopsis="Revoke the lease with this id, else every lease under the prefix.",
        ),
        Path(
            ("leases/revoke-force/{prefix*}", "revoke-force/{prefix*}"),
            write(revoke_prefix(True), "Forget leases under a prefix", sudo=True),
            PrefixFields,
            synopsis="Revoke leases under a prefix, ignoring backend errors.",
        ),
    ]
