"""The token auth method at auth/token/: create (with parent, orphan, roles), lookup, renew,
revoke (tree, orphan, by accessor), accessors, roles."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from functools import lru_cache
from typing import Annotated, Any

import msgspec

from services.secrets.auth.token_lookup import LookupRenderer
from services.secrets.auth.token_params import parse_cidrs
from services.secrets.core.dispatch import auth_block
from services.secrets.core.namespaces import ROOT
from services.secrets.core.tokens import TokenEntry, random_b62
from services.secrets.errors import SecretsError, bad_request, not_found, permission_denied
from services.secrets.framework.backend import Backend
from services.secrets.framework.fields import CommaList, Duration, desc
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import Request, Response
from services.secrets.identity.access import entity_policies


def _short(seconds: int) -> str:
    """2764800 -> "768h", 90 -> "1m30s": the duration text of OpenBao's TTL warnings."""
    h, rem = divmod(seconds, 3600)
    m, sec = divmod(rem, 60)
    return "".join(f"{v}{u}" for v, u in ((h, "h"), (m, "m"), (sec, "s")) if v) or "0s"


class CreateFields(msgspec.Struct, kw_only=True):
    id: Annotated[str, desc("the token id; root callers only")] = ""
    role_name: str = ""
    policies: CommaList = []
    meta: dict[str, str] = {}
    no_parent: bool = False
    no_default_policy: bool = False
    renewable: bool = True
    ttl: Duration = 0
    type: Annotated[str, desc("service or batch; empty: the role's or service")] = ""
    explicit_max_ttl: Duration = 0
    display_name: str = ""
    num_uses: int = 0
    period: Duration = 0
    entity_alias: str = ""
    # Some clients send a lease alias for ttl.
    lease: Duration = 0


class TokenField(msgspec.Struct, kw_only=True):
    token: str = ""
    increment: Duration = 0


class AccessorField(msgspec.Struct, kw_only=True):
    accessor: str = ""
    increment: Duration = 0


class IncrementField(msgspec.Struct, kw_only=True):
    increment: Duration = 0


class RoleFields(msgspec.Struct, kw_only=True):
    role_name: str
    allowed_policies: CommaList = []
    disallowed_policies: CommaList = []
    allowed_policies_glob: CommaList = []
    disallowed_policies_glob: CommaList = []
    orphan: bool = False
    renewable: bool = True
    path_suffix: str = ""
    allowed_entity_aliases: CommaList = []
    token_period: Duration = 0
    period: Duration = 0
    token_explicit_max_ttl: Duration = 0
    explicit_max_ttl: Duration = 0
    token_type: str = "default-service"
    token_no_default_policy: bool = False
    token_num_uses: int = 0
    token_ttl: Duration = 0
    token_max_ttl: Duration = 0
    token_bound_cidrs: CommaList = []


class RoleName(msgspec.Struct, kw_only=True):
    role_name: str


@lru_cache(maxsize=4096)  # a token's times are the same on every lookup of it
def _ts(value: float) -> str | None:
    if not value:
        return None
    return datetime.fromtimestamp(value, UTC).isoformat().replace("+00:00", "Z")


ROLE_TOKEN_TYPES = ("service", "batch", "default", "default-service", "default-batch")


def token_kind(requested: str, role_kind: str | None) -> str:
    """service or batch, from the request's `type` and a role's `token_type` (Vault's rules:
    a role's plain type is fixed, its default-* type is only a default)."""
    want = requested.strip().lower()
    if want in ("", "default"):
        want = ""
    elif want not in ("service", "batch"):
        raise bad_request("invalid 'token_type' value")
    fixed = role_kind if role_kind in ("service", "batch") else ""
    if fixed:
        if want and want != fixed:
            raise bad_request(
                f"a {want!r} token was requested but the role only issues {fixed!r} tokens"
            )
        return fixed
    default = "batch" if role_kind == "default-batch" else "service"
    return want or default


def lookup_data(entry: TokenEntry, *, include_id: bool) -> dict[str, Any]:
    data: dict[str, Any] = {
        "accessor": entry.accessor,
        "creation_time": int(entry.creation_time),
        "creation_ttl": entry.ttl,
        "display_name": entry.display_name,
        "entity_id": entry.entity_id,
        "expire_time": _ts(entry.expire_time),
        "explicit_max_ttl": entry.explicit_max_ttl,
        "id": entry.id if include_id else "",
        "issue_time": _ts(entry.creation_time),
        "meta": entry.meta,
        "num_uses": max(entry.num_uses, 0),
        "orphan": entry.orphan,
        "path": entry.path,
        "policies": entry.policies,
        "renewable": entry.renewable,
        "ttl": entry.remaining(),
        "type": entry.type,
    }
    if entry.period:
        data["period"] = entry.period
    if entry.role:
        data["role"] = entry.role
    return data


class TokenBackend(Backend):
    type_name = "token"
    is_auth = True
    help_text = "Tokens: the core auth method. Every other method ends in a token."

    def _store(self):  # type: ignore[no-untyped-def]
        return self.core.tokens

    async def _caller(self, req: Request) -> TokenEntry:
        if req.token is None:
            raise permission_denied()
        return req.token

    # ---- create -------------------------------------------------------------------------
    async def _create(
        self, req: Request, f: CreateFields, *, orphan: bool, role: RoleFields | None = None
    ) -> Response:
        parent = await self._caller(req)
        is_root = parent.is_root()
        kind = token_kind(f.type, role.token_type if role else None)
        if parent.type == "batch" and not (orphan or f.no_parent or (role and role.orphan)):
            raise bad_request("batch tokens cannot create more tokens")
        if kind == "batch":
            if f.period or (role and (role.token_period or role.period)):
                raise bad_request('batch tokens cannot have "period" set')
            if f.num_uses or (role and role.token_num_uses):
                raise bad_request('batch tokens cannot have "num_uses" set')
            if f.id:
                raise bad_request("batch tokens cannot have a custom id")
        if f.num_uses < 0:
            raise bad_request("number of uses cannot be negative")
        privileged = is_root or "sudo" in req.capabilities
        if f.id:
            if not privileged:
                raise bad_request("root or sudo privileges required to specify token id")
            if "." in f.id:
                raise bad_request("token ids may not contain a '.'")
        if f.no_parent and not privileged:
            raise bad_request("root or sudo privileges required to create orphan token")
        if f.period and not privileged:
            raise bad_request("root or sudo privileges required to create periodic token")
        policies = [p.strip().lower() for p in f.policies if p.strip()]
        if role is not None:
            allowed = set(role.allowed_policies)
            if not policies:
                policies = (
                    sorted(allowed) if allowed else [p for p in parent.policies if p != "root"]
                )
            bad = [
                p
                for p in policies
                if p in role.disallowed_policies
                or (allowed and p not in allowed and p != "default")
            ]
            if bad:
                raise bad_request(
                    f"token policies ({bad}) must be subset of the role's allowed policies"
                )
            orphan = orphan or role.orphan
        elif not policies:
            policies = list(parent.policies)
        elif not is_root:
            extra = sorted(set(policies) - set(parent.policies) - {"default"})
            if extra:
                raise bad_request(f"child policies must be subset of parent: {extra}")
        no_default = f.no_default_policy or (role.token_no_default_policy if role else False)
        if "root" in policies:
            if not is_root:
                raise bad_request("root tokens may only be created by a root token")
            policies = ["root"]
        elif not no_default and "default" not in policies:
            policies.append("default")
        policies = sorted(set(policies))
        period = f.period or (role.token_period or role.period if role else 0)
        explicit_max = f.explicit_max_ttl or (
            role.token_explicit_max_ttl or role.explicit_max_ttl if role else 0
        )
        ttl = period or f.ttl or f.lease or (role.token_ttl if role else 0)
        mount = req.mount
        default_ttl, max_ttl = self._store().ttl_limits(
            mount.config.default_lease_ttl if mount else 0,
            mount.config.max_lease_ttl if mount else 0,
        )
        if ttl == 0 and policies != ["root"]:
            ttl = default_ttl
        warnings: list[str] = []
        policy_store = self.core.policies
        for name in policies:  # as Vault: created anyway, with a warning per unknown policy
            if name != "root" and not await policy_store.exists(req.namespace, name):
                warnings.append(f'Policy "{name}" does not exist')
        if explicit_max:
            if ttl > explicit_max:
                warnings.append(
                    f'TTL of "{_short(ttl)}" exceeded the effective max_ttl of '
                    f'"{_short(explicit_max)}"; TTL value is capped accordingly'
                )
            ttl = min(ttl, explicit_max) if ttl else explicit_max
        if ttl and not period:
            if not explicit_max and ttl > max_ttl:
                # OpenBao caps the TTL and says so (issue 11's conformance suite checks it).
                warnings.append(
                    f'TTL of "{_short(ttl)}" exceeded the effective max_ttl of '
                    f'"{_short(max_ttl)}"; TTL value is capped accordingly'
                )
            ttl = min(ttl, max_ttl) if not explicit_max else ttl
        if kind == "batch" and "root" in policies:
            raise bad_request("batch tokens cannot be root tokens")
        display = f.display_name.strip().lower().replace(" ", "-")
        entry = TokenEntry(
            id=f.id or self._store().new_id(req.namespace),
            accessor=random_b62(),
            policies=policies,
            meta=f.meta or None,
            display_name=f"token-{display}" if display else "token",
            path=req.full_path,
            creation_time=time.time(),
            ttl=ttl,
            explicit_max_ttl=explicit_max,
            period=period,
            num_uses=f.num_uses,
            renewable=f.renewable and (role.renewable if role else True),
            orphan=orphan or f.no_parent,
            parent="" if (orphan or f.no_parent) else self._store().hash(parent.id),
            namespace_id=req.namespace.id,
            role=role.role_name if role else "",
            # As Vault: a child token acts for its parent's entity; an orphan for none.
            entity_id="" if (orphan or f.no_parent) else parent.entity_id,
            # As Vault: the role's CIDRs bind every token made through it.
            bound_cidrs=list(role.token_bound_cidrs) if role else [],
        )
        try:
            if kind == "batch":
                await self._store().create_batch(entry)
            else:
                await self._store().create(entry, custom_id=bool(f.id))
        except Exception as exc:
            if f.id:
                raise bad_request("a token with that id already exists") from exc
            raise
        return Response(auth=auth_block(entry), warnings=warnings)

    # ---- paths --------------------------------------------------------------------------
    def build_paths(self) -> list[Path]:
        async def create(req: Request, f: CreateFields) -> Response:
            if f.role_name:
                role = await self.storage.get_obj(f"roles/{f.role_name}", RoleFields)
                if role is None:
                    raise bad_request(f"unknown role {f.role_name}")
                return await self._create(req, f, orphan=False, role=role)
            return await self._create(req, f, orphan=False)

        async def create_orphan(req: Request, f: CreateFields) -> Response:
            return await self._create(req, f, orphan=True)

        rendered = LookupRenderer(lambda e, include_id: lookup_data(e, include_id=include_id))

        async def shown(entry: TokenEntry, *, include_id: bool) -> Response:
            if not entry.entity_id and entry.type != "batch":  # batch entries are per lookup
                return Response(data=rendered.render(entry, include_id=include_id))
            data = lookup_data(entry, include_id=include_id)
            if entry.entity_id:
                ns = self.core.namespaces.by_id.get(entry.namespace_id, ROOT)
                policies = await entity_policies(self.core, ns, entry.entity_id)
                if policies:
                    data["identity_policies"] = policies
            return Response(data=data)

        async def lookup(req: Request, f: TokenField) -> Response:
            tok = f.token or req.client_token
            entry = await self._store().lookup(tok)
            if entry is None:
                raise SecretsError(403, "bad token")
            return await shown(entry, include_id=True)

        async def lookup_self(req: Request, _: Any) -> Response:
            entry = await self._caller(req)
            return await shown(entry, include_id=True)

        async def lookup_accessor(req: Request, f: AccessorField) -> Response:
            entry = await self._store().lookup_accessor(f.accessor, req.namespace.id)
            if entry is None:
                raise bad_request("invalid accessor")
            return await shown(entry, include_id=False)

        async def _renew(req: Request, entry: TokenEntry | None, increment: int) -> Response:
            if entry is None:
                raise bad_request("token not found")
            if entry.type == "batch":
                raise bad_request("batch tokens cannot be renewed")
            if not entry.renewable:
                raise bad_request("lease is not renewable")
            if not entry.ttl and not entry.period:
                # A token without a TTL (root) has no lease: OpenBao refuses the renewal.
                raise bad_request("lease is not renewable")
            renewed = await self._store().renew(entry, increment)
            block = auth_block(renewed)
            block["lease_duration"] = max(0, round(renewed.expire_time - time.time()))
            return Response(auth=block)

        async def renew(req: Request, f: TokenField) -> Response:
            return await _renew(req, await self._store().lookup(f.token), f.increment)

        async def renew_self(req: Request, f: IncrementField) -> Response:
            return await _renew(req, await self._caller(req), f.increment)

        async def renew_accessor(req: Request, f: AccessorField) -> Response:
            entry = await self._store().lookup_accessor(f.accessor, req.namespace.id)
            return await _renew(req, entry, f.increment)

        def revocable(entry: TokenEntry) -> TokenEntry:
            if entry.type == "batch":
                raise bad_request("batch tokens cannot be revoked")
            return entry

        async def revoke(req: Request, f: TokenField) -> Response:
            entry = await self._store().lookup(f.token)
            if entry is not None:
                await self._store().revoke_tree(revocable(entry))
            return Response()

        async def revoke_self(req: Request, _: Any) -> Response:
            await self._store().revoke_tree(revocable(await self._caller(req)))
            return Response()

        async def revoke_accessor(req: Request, f: AccessorField) -> Response:
            entry = await self._store().lookup_accessor(f.accessor, req.namespace.id)
            if entry is None:
                # OpenBao: nothing to revoke is a success with a warning.
                return Response(warnings=["No token found with this accessor"])
            await self._store().revoke_tree(entry)
            return Response()

        async def revoke_orphan(req: Request, f: TokenField) -> Response:
            caller = await self._caller(req)
            if not (caller.is_root() or "sudo" in req.capabilities):
                raise permission_denied()
            entry = await self._store().lookup(f.token)
            if entry is not None:
                await self._store().revoke_orphan(revocable(entry))
            return Response()

        async def accessors(req: Request, _: NoFields) -> Response:
            keys = await self._store().accessors(req.namespace.id)
            if not keys:
                raise not_found()
            return Response(data={"keys": keys})

        async def role_list(req: Request, _: NoFields) -> Response:
            keys = await self.storage.list("roles/")
            if not keys:
                raise not_found()
            return Response(data={"keys": keys})

        async def role_read(req: Request, f: RoleName) -> Response:
            role = await self.storage.get_obj(f"roles/{f.role_name}", RoleFields)
            if role is None:
                raise not_found()
            data = msgspec.to_builtins(role)
            data["name"] = data.pop("role_name")
            return Response(data=data)

        async def role_write(req: Request, f: RoleFields) -> Response:
            f.token_type = f.token_type.strip().lower() or "default-service"
            if f.token_type not in ROLE_TOKEN_TYPES:
                raise bad_request("invalid 'token_type' value")
            if f.token_type == "default":
                f.token_type = "default-service"
            f.token_bound_cidrs = parse_cidrs(f.token_bound_cidrs, "token_bound_cidrs")
            await self.storage.put_obj(f"roles/{f.role_name}", f)
            return Response()

        async def role_delete(req: Request, f: RoleName) -> Response:
            await self.storage.delete(f"roles/{f.role_name}")
            return Response()

        async def create_role(req: Request, f: CreateFields) -> Response:
            return await create(req, f)

        async def role_exists(req: Request, f: Any) -> bool:
            return await self.storage.get(f"roles/{f.role_name}") is not None

        r = Operation
        return [
            Path(
                "create",
                write(create, "Create a child token"),
                CreateFields,
                synopsis="Create a token as a child of the caller.",
            ),
            Path(
                "create-orphan",
                write(create_orphan, "Create an orphan token"),
                CreateFields,
                synopsis="Create a token with no parent.",
            ),
            Path(
                "create/{role_name}",
                write(create_role, "Create a token from a role"),
                CreateFields,
                synopsis="Create a token with a role's settings.",
            ),
            Path(
                "lookup",
                {Op.READ: r(lookup, "Look up a token"), **write(lookup, "Look up a token")},
                TokenField,
                synopsis="Read a token's properties.",
            ),
            Path(
                "lookup-self",
                {
                    Op.READ: r(lookup_self, "Look up the caller"),
                    **write(lookup_self, "Look up the caller"),
                },
                NoFields,
                synopsis="Read the calling token's properties.",
            ),
            Path(
                "lookup-accessor",
                write(lookup_accessor, "Look up by accessor"),
                AccessorField,
                synopsis="Read a token's properties by accessor.",
            ),
            Path("renew", write(renew, "Renew a token"), TokenField, synopsis="Renew a token."),
            Path(
                "renew-self",
                write(renew_self, "Renew the caller"),
                IncrementField,
                synopsis="Renew the calling token.",
            ),
            Path(
                "renew-accessor",
                write(renew_accessor, "Renew by accessor"),
                AccessorField,
                synopsis="Renew a token by accessor.",
            ),
            Path(
                "revoke",
                write(revoke, "Revoke a token and its children"),
                TokenField,
                synopsis="Revoke a token, its children and their leases.",
            ),
            Path(
                "revoke-self",
                write(revoke_self, "Revoke the caller"),
                NoFields,
                synopsis="Revoke the calling token and its children.",
            ),
            Path(
                "revoke-accessor",
                write(revoke_accessor, "Revoke by accessor"),
                AccessorField,
                synopsis="Revoke a token by accessor.",
            ),
            Path(
                "revoke-orphan",
                write(revoke_orphan, "Revoke, orphaning the children"),
                TokenField,
                synopsis="Revoke a token; its children become orphans.",
            ),
            Path(
                ("accessors", "accessors/"),
                {Op.LIST: r(accessors, "List accessors", sudo=True)},
                synopsis="List the accessors of every token.",
            ),
            Path(
                ("roles", "roles/"),
                {Op.LIST: r(role_list, "List roles")},
                synopsis="List token roles.",
            ),
            Path(
                "roles/{role_name}",
                {
                    Op.READ: r(role_read, "Read a role"),
                    **write(role_write, "Write a role"),
                    Op.DELETE: r(role_delete, "Delete a role"),
                },
                RoleFields,
                exists=role_exists,
                synopsis="Token roles.",
            ),
        ]


__all__ = ["SecretsError", "TokenBackend"]
