"""The dbcloud engine's paths: config, roles, and creds with a lease whose end deletes the key
at the provider."""

from __future__ import annotations

import json
import secrets
import time
from typing import Annotated, Any

import msgspec
import structlog

from services.secrets.engines.dbcloud.client import AdminClient
from services.secrets.engines.dbcloud.model import DEFAULT_API_URL, Config, Role, validate
from services.secrets.errors import SecretsError, bad_request, not_found
from services.secrets.framework.backend import Backend, SecretType
from services.secrets.framework.durations import format_duration
from services.secrets.framework.fields import CommaList, Duration, desc
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import LeaseSpec, RawResponse, Request, Response

log = structlog.get_logger("dbcloud")

SECRET_TYPE = "programmatic_api_key"


class ConfigFields(msgspec.Struct, kw_only=True):
    public_key: Annotated[str, desc("public half of the provider's admin API key")] = ""
    private_key: Annotated[str, desc("private half of the provider's admin API key")] = ""
    api_url: Annotated[str, desc("base URL of the provider's admin API")] = ""


class RoleFields(msgspec.Struct, kw_only=True):
    # None means "not given": an update keeps the stored value (roles excepted: required).
    name: str
    organization_id: str | None = None
    project_id: str | None = None
    roles: CommaList | None = None
    ip_addresses: CommaList | None = None
    cidr_blocks: CommaList | None = None
    ttl: Duration | None = None
    max_ttl: Duration | None = None


class NameOnly(msgspec.Struct, kw_only=True):
    name: str


class DbCloudBackend(Backend):
    type_name = "dbcloud"
    help_text = (
        "Programmatic API keys for a cloud database provider: each credential is a "
        "new key scoped to a role's organization or project, deleted at the provider "
        "when its lease ends."
    )

    def build_paths(self) -> list[Path]:
        self.secret_types[SECRET_TYPE] = SecretType(revoke=self._revoke, renew=self._renew)
        return [
            Path(
                "config",
                {
                    Op.READ: Operation(self._read_config, "Read the configuration"),
                    **write(self._write_config, "Configure the provider keys"),
                },
                ConfigFields,
                synopsis="The admin API key pair the engine uses.",
            ),
            Path(
                ("roles", "roles/"),
                {
                    Op.READ: Operation(self._roles_array, "Read every role"),
                    Op.LIST: Operation(self._list_roles, "List roles"),
                },
                synopsis="List the roles.",
            ),
            Path(
                "roles/{name}",
                {
                    Op.READ: Operation(self._read_role, "Read a role"),
                    **write(self._write_role, "Create or update a role"),
                    Op.DELETE: Operation(self._delete_role, "Delete a role"),
                },
                RoleFields,
                exists=self._role_exists,
                synopsis="Roles: the scope, provider roles and access list of keys.",
            ),
            Path(
                "creds/{name}",
                {
                    Op.READ: Operation(self._creds, "Generate a key"),
                    Op.UPDATE: Operation(self._creds, "Generate a key"),
                },
                NameOnly,
                synopsis="Generate a programmatic API key for a role.",
            ),
        ]

    # ---- config -----------------------------------------------------------------------------
    async def _config(self) -> Config:
        cfg = await self.storage.get_obj("config", Config)
        if cfg is None:
            raise bad_request(
                "the engine is not configured: write public_key and private_key to config first"
            )
        return cfg

    async def _read_config(self, req: Request, _: ConfigFields) -> Response:
        cfg = await self.storage.get_obj("config", Config)
        if cfg is None:
            raise not_found()
        return Response(data={"public_key": cfg.public_key, "api_url": cfg.api_url})

    async def _write_config(self, req: Request, f: ConfigFields) -> Response:
        if not f.public_key:
            raise bad_request("missing field 'public_key'")
        if not f.private_key:
            raise bad_request("missing field 'private_key'")
        url = f.api_url or DEFAULT_API_URL
        if not url.startswith(("http://", "https://")):
            raise bad_request("api_url must be an http or https URL")
        await self.storage.put_obj(
            "config", Config(public_key=f.public_key, private_key=f.private_key, api_url=url)
        )
        return Response()

    # ---- roles ------------------------------------------------------------------------------
    async def _role(self, name: str) -> Role | None:
        return await self.storage.get_obj(f"roles/{name}", Role)

    async def _role_exists(self, req: Request, f: RoleFields) -> bool:
        return await self._role(f.name) is not None

    async def _write_role(self, req: Request, f: RoleFields) -> Response:
        if f.roles is None:
            # Required on every write: the list replaces the stored one.
            raise bad_request("missing field 'roles': at least one role is required")
        role = await self._role(f.name) or Role(name=f.name)
        changes: dict[str, Any] = {
            k: getattr(f, k)
            for k in (
                "organization_id",
                "project_id",
                "roles",
                "ip_addresses",
                "cidr_blocks",
                "ttl",
                "max_ttl",
            )
            if getattr(f, k) is not None
        }
        role = msgspec.structs.replace(role, **changes)
        validate(role)
        await self.storage.put_obj(f"roles/{f.name}", role)
        return Response(data=role.to_json())

    async def _read_role(self, req: Request, f: RoleFields) -> Response:
        role = await self._role(f.name)
        if role is None:
            raise not_found()
        return Response(data=role.to_json())

    async def _delete_role(self, req: Request, f: RoleFields) -> Response:
        await self.storage.delete(f"roles/{f.name}")
        return Response()

    async def _list_roles(self, req: Request, _: NoFields) -> Response:
        keys = await self.storage.list("roles/")
        if not keys:
            raise not_found()
        return Response(data={"keys": keys})

    async def _roles_array(self, req: Request, _: NoFields) -> Response:
        # The seed answers `GET roles` with a bare JSON array of role records.
        out = []
        for name in await self.storage.list("roles/"):
            role = await self._role(name)
            if role is not None:
                out.append(role.to_json())
        return Response(raw=RawResponse(status=200, body=json.dumps(out).encode()))

    # ---- credentials ------------------------------------------------------------------------
    async def _creds(self, req: Request, f: NameOnly) -> Response:
        role = await self._role(f.name)
        if role is None:
            raise bad_request(f"unknown role: {f.name}")
        cfg = await self._config()
        client = AdminClient(cfg.api_url, cfg.public_key, cfg.private_key)
        description = f"trellis-{f.name}-{time.time_ns()}-{secrets.token_hex(3)}"[:250]
        if role.organization_id:
            key = await client.create_org_key(role.organization_id, description, role.roles)
            org_id = role.organization_id
        else:
            key = await client.create_project_key(role.project_id, description, role.roles)
            org_id = _org_of(key)
        key_id = str(key.get("id", ""))
        if not key_id or not key.get("privateKey"):
            raise SecretsError(502, "provider API: the created key has no id or private key")
        try:
            if not org_id:
                org_id = await client.project_org(role.project_id)
            if role.ip_addresses or role.cidr_blocks:
                await client.add_access_list(org_id, key_id, role.ip_addresses, role.cidr_blocks)
        except BaseException:
            # Nothing half created: a key without its access list must not survive.
            await self._delete_key(client, org_id, role.project_id, key_id, quiet=True)
            raise
        internal = {
            "api_key_id": key_id,
            "organization_id": org_id,
            "project_id": role.project_id,
            "role": f.name,
        }
        ttl = self._effective_ttl(req, role)
        return Response(
            data={
                "description": description,
                "public_key": key.get("publicKey", ""),
                "private_key": key["privateKey"],
                "lease_duration": format_duration(ttl),
                "lease_renewable": True,
            },
            lease=LeaseSpec(
                ttl=role.ttl,
                max_ttl=role.max_ttl,
                renewable=True,
                internal=internal,
                secret_type=SECRET_TYPE,
            ),
        )

    def _effective_ttl(self, req: Request, role: Role) -> int:
        """The lease duration the core will grant (same rule as the dispatcher)."""
        mount = req.mount
        default_ttl, max_ttl = self.core.tokens.ttl_limits(
            mount.config.default_lease_ttl if mount else 0,
            mount.config.max_lease_ttl if mount else 0,
        )
        return min(role.ttl or default_ttl, role.max_ttl or max_ttl, max_ttl)

    async def _delete_key(
        self, client: AdminClient, org_id: str, project_id: str, key_id: str, *, quiet: bool = False
    ) -> None:
        try:
            if project_id:
                await client.unassign_project_key(project_id, key_id)
            if org_id:
                await client.delete_org_key(org_id, key_id)
        except SecretsError:
            if not quiet:
                raise
            log.warning("could not delete a half-created key", key_id=key_id)

    async def _revoke(self, internal: dict[str, Any]) -> None:
        cfg = await self._config()
        client = AdminClient(cfg.api_url, cfg.public_key, cfg.private_key)
        await self._delete_key(
            client,
            str(internal.get("organization_id", "")),
            str(internal.get("project_id", "")),
            str(internal.get("api_key_id", "")),
        )

    async def _renew(self, internal: dict[str, Any], ttl: int) -> int:
        # The lease manager caps the new expiry at the lease's max_ttl.
        role = await self._role(str(internal.get("role", "")))
        return ttl or (role.ttl if role else 0)


def _org_of(key: dict[str, Any]) -> str:
    for r in key.get("roles") or []:
        if isinstance(r, dict) and r.get("orgId"):
            return str(r["orgId"])
    return ""
