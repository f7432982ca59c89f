"""The approle auth method: machines log in with a role id and a secret id.

Storage (the mount's encrypted view):
- `role/<lowercased name>`: the role, with a random `uuid` that names its secret-id folder, so a
  role deleted and created again never sees the old secret ids;
- `role-id/<hmac(role_id)>`: the role a role id belongs to;
- `secret-id/<role uuid>/<hmac(secret_id)>`: a secret id's properties (never the id itself);
- `accessor/<hmac(accessor)>`: where the secret id of an accessor lives.
Secret ids are found and compared by HMAC only. Uses are counted with compare-and-set, so a
secret id with N uses gives N logins across all replicas, never more.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any

import msgspec

from services.secrets.auth.exact import equal, go_trim_space
from services.secrets.auth.token_params import (
    TokenInput,
    TokenParams,
    addr_allowed,
    apply_token_input,
    cidrs_subset,
    login_auth,
    parse_cidrs,
    take_deprecated,
    token_data,
)
from services.secrets.errors import SecretsError, bad_request, not_found, permission_denied
from services.secrets.framework.backend import Backend
from services.secrets.framework.fields import CommaList, Duration, desc
from services.secrets.framework.listing import list_prefix, listing
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import Request, Response
from shared import jsonbody
from shared.storage import CasConflict

INVALID_LOGIN = "invalid role or secret ID"
# Vault: letters, digits, space, hyphen, underscore and period.
_ROLE_NAME = re.compile(r"[\w .-]+")
# Vault allows 4 KiB, but names become storage keys (NATS subjects, whose control line is
# 4 KiB in all): keep them well below.
MAX_NAME_BYTES = 256
_ZERO_TIME = "0001-01-01T00:00:00Z"
# Deprecated role fields and the names that replaced them.
_ALIASES = {"policies": "token_policies", "period": "token_period"}


class RoleEntry(TokenParams, kw_only=True):
    name: str
    role_id: str
    uuid: str
    bind_secret_id: bool = True
    secret_id_bound_cidrs: list[str] = []
    secret_id_num_uses: int = 0
    secret_id_ttl: int = 0
    local_secret_ids: bool = False
    legacy: list[str] = []


class SecretIdEntry(msgspec.Struct, kw_only=True):
    hmac: str  # of the secret id, compared in constant time at login
    accessor: str
    num_uses: int = 0  # uses left; 0 means unlimited unless `spent`
    ttl: int = 0
    creation_time: float
    expiration_time: float = 0.0
    last_updated_time: float
    metadata: dict[str, str] = {}
    cidr_list: list[str] = []
    token_bound_cidrs: list[str] = []
    spent: bool = False

    def expired(self, now: float) -> bool:
        return bool(self.expiration_time) and now >= self.expiration_time


class AccessorRef(msgspec.Struct, kw_only=True):
    role_uuid: str
    secret_hmac: str


class RoleFields(TokenInput, kw_only=True):
    role_name: str
    role_id: Annotated[str, desc("a custom role id (default: a random UUID)")] | None = None
    bind_secret_id: Annotated[bool, desc("require a secret id at login")] | None = None
    secret_id_bound_cidrs: Annotated[CommaList, desc("CIDRs allowed to log in")] | None = None
    secret_id_num_uses: Annotated[int, desc("default uses of a secret id")] | None = None
    secret_id_ttl: Annotated[Duration, desc("default lifetime of a secret id")] | None = None
    local_secret_ids: Annotated[bool, desc("cluster-local secret ids (create only)")] | None = None
    # hvac sends this name for local_secret_ids.
    enable_local_secret_ids: bool | None = None
    policies: Annotated[CommaList, desc("deprecated: use token_policies")] | None = None
    period: Annotated[Duration, desc("deprecated: use token_period")] | None = None
    bound_cidr_list: Annotated[CommaList, desc("deprecated: secret_id_bound_cidrs")] | None = None


class RoleName(msgspec.Struct, kw_only=True):
    role_name: str


class RoleIdFields(msgspec.Struct, kw_only=True):
    role_name: str
    role_id: Annotated[str, desc("the new role id")] = ""


class SecretIdFields(msgspec.Struct, kw_only=True):
    role_name: str
    secret_id: Annotated[str, desc("the secret id (custom-secret-id only)")] = ""
    metadata: Annotated[str | dict[str, Any], desc("JSON object of string values")] | None = None
    cidr_list: Annotated[CommaList, desc("CIDRs this secret id may log in from")] = []
    token_bound_cidrs: Annotated[CommaList, desc("CIDRs of the login tokens")] = []
    num_uses: Annotated[int, desc("uses; at most the role's secret_id_num_uses")] | None = None
    ttl: Annotated[Duration, desc("lifetime; at most the role's secret_id_ttl")] | None = None


class SecretIdLookup(msgspec.Struct, kw_only=True):
    role_name: str
    secret_id: str = ""


class AccessorFields(msgspec.Struct, kw_only=True):
    role_name: str
    secret_id_accessor: str = ""


class LoginFields(msgspec.Struct, kw_only=True):
    role_id: str = ""
    secret_id: str = ""


def _rfc3339(ts: float) -> str:
    if not ts:
        return _ZERO_TIME
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def _metadata(raw: str | dict[str, Any] | None) -> dict[str, str]:
    """Secret-id metadata: a JSON object (or its text) of string values."""
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:
            raw = jsonbody.loads(raw)
        except ValueError:
            raise bad_request("failed to parse metadata: not a JSON object") from None
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        raise bad_request("failed to parse metadata: expected an object of string values")
    return {str(k): v for k, v in raw.items()}


# Per-field endpoints role/<name>/<suffix>: (suffix, role field, request fields accepted).
_FIELD_PATHS: list[tuple[str, str, tuple[str, ...]]] = [
    ("policies", "token_policies", ("token_policies", "policies")),
    ("secret-id-num-uses", "secret_id_num_uses", ("secret_id_num_uses",)),
    ("secret-id-ttl", "secret_id_ttl", ("secret_id_ttl",)),
    ("token-ttl", "token_ttl", ("token_ttl",)),
    ("token-max-ttl", "token_max_ttl", ("token_max_ttl",)),
    ("token-num-uses", "token_num_uses", ("token_num_uses",)),
    ("bind-secret-id", "bind_secret_id", ("bind_secret_id",)),
    ("secret-id-bound-cidrs", "secret_id_bound_cidrs", ("secret_id_bound_cidrs",)),
    ("token-bound-cidrs", "token_bound_cidrs", ("token_bound_cidrs",)),
    ("period", "token_period", ("token_period", "period")),
    ("local-secret-ids", "local_secret_ids", ()),
]


class AppRoleBackend(Backend):
    type_name = "approle"
    is_auth = True
    help_text = (
        "AppRole: machines log in with a role id and a secret id. Roles are managed "
        "under role/; secret ids are issued at role/<name>/secret-id."
    )

    # ---- keys and lookups ---------------------------------------------------------------
    def _hmac(self, kind: str, value: str) -> str:
        # Domain-separated, so a secret id and a role id with equal text never share a key.
        return self.core.tokens.hash(f"approle-{kind}:{value}")

    @staticmethod
    def _key(raw: str) -> str:
        name = raw.strip()
        if not _ROLE_NAME.fullmatch(name):
            raise bad_request(
                "role_name may contain only letters, digits, spaces, '-', '_' and '.'"
            )
        if len(name.encode()) > MAX_NAME_BYTES:
            raise bad_request(f"role_name must be at most {MAX_NAME_BYTES} bytes")
        return name.lower()

    async def _role(self, raw_name: str) -> tuple[RoleEntry, int] | None:
        return await self.storage.get_obj_entry(f"role/{self._key(raw_name)}", RoleEntry)

    async def _need_role(self, raw_name: str) -> RoleEntry:
        got = await self._role(raw_name)
        if got is None:
            raise bad_request(f"role {raw_name!r} does not exist")
        return got[0]

    def _sid_key(self, role: RoleEntry, secret_hmac: str) -> str:
        return f"secret-id/{role.uuid}/{secret_hmac}"

    async def _forget_secret(self, role_uuid: str, secret_hmac: str, accessor: str) -> None:
        await self.storage.delete(f"accessor/{self._hmac('accessor', accessor)}")
        await self.storage.delete(f"secret-id/{role_uuid}/{secret_hmac}")

    async def _secret_by_accessor(
        self, role: RoleEntry, accessor: str
    ) -> tuple[SecretIdEntry, str] | None:
        ref = await self.storage.get_obj(
            f"accessor/{self._hmac('accessor', accessor)}", AccessorRef
        )
        if ref is None or ref.role_uuid != role.uuid:
            return None
        entry = await self.storage.get_obj(self._sid_key(role, ref.secret_hmac), SecretIdEntry)
        return None if entry is None else (entry, ref.secret_hmac)

    # ---- roles --------------------------------------------------------------------------
    async def _write_role(self, f: RoleFields, *, must_exist: bool = False) -> None:
        key = self._key(f.role_name)
        used, dropped = take_deprecated(
            f, {old: (new, getattr(f, old)) for old, new in _ALIASES.items()}
        )
        if f.bound_cidr_list is not None:
            if f.secret_id_bound_cidrs is not None:
                raise bad_request(
                    "cannot specify both 'bound_cidr_list' and 'secret_id_bound_cidrs'"
                )
            f.secret_id_bound_cidrs = f.bound_cidr_list
        local = f.local_secret_ids if f.local_secret_ids is not None else f.enable_local_secret_ids
        for _ in range(20):
            got = await self.storage.get_obj_entry(f"role/{key}", RoleEntry)
            if got is None and must_exist:
                raise not_found(f"role {f.role_name!r} does not exist")
            current = (
                got[0]
                if got
                else RoleEntry(name=f.role_name.strip(), role_id="", uuid=str(uuid.uuid4()))
            )
            changes: dict[str, Any] = apply_token_input(current, f)
            if f.bind_secret_id is not None:
                changes["bind_secret_id"] = f.bind_secret_id
            if f.secret_id_bound_cidrs is not None:
                changes["secret_id_bound_cidrs"] = parse_cidrs(
                    f.secret_id_bound_cidrs, "secret_id_bound_cidrs"
                )
            if f.secret_id_num_uses is not None:
                if f.secret_id_num_uses < 0:
                    raise bad_request("secret_id_num_uses cannot be negative")
                changes["secret_id_num_uses"] = f.secret_id_num_uses
            if f.secret_id_ttl is not None:
                if f.secret_id_ttl < 0:
                    raise bad_request("secret_id_ttl cannot be negative")
                changes["secret_id_ttl"] = f.secret_id_ttl
            if local is not None:
                if got is not None and local != current.local_secret_ids:
                    raise bad_request("local_secret_ids can only be modified during role creation")
                changes["local_secret_ids"] = local
            legacy = sorted((set(current.legacy) - dropped) | used)
            role = msgspec.structs.replace(current, legacy=legacy, **changes)
            if (
                not role.bind_secret_id
                and not role.secret_id_bound_cidrs
                and not role.token_bound_cidrs
            ):
                raise bad_request("at least one constraint should be enabled on the role")
            new_role_id = f.role_id.strip() if f.role_id is not None else ""
            if f.role_id is not None and not new_role_id:
                raise bad_request("role_id cannot be empty")
            if got is None and not new_role_id:
                new_role_id = str(uuid.uuid4())
            old_role_id = current.role_id
            if new_role_id and new_role_id != old_role_id:
                role = msgspec.structs.replace(role, role_id=new_role_id)
                await self._claim_role_id(new_role_id, key)
            raw = msgspec.json.encode(role)
            try:
                if got is None:
                    await self.storage.create(f"role/{key}", raw)
                else:
                    await self.storage.update(f"role/{key}", raw, got[1])
            except CasConflict:
                if new_role_id and new_role_id != old_role_id:
                    await self.storage.delete(f"role-id/{self._hmac('role-id', new_role_id)}")
                await asyncio.sleep(0.005)
                continue
            if old_role_id and new_role_id and new_role_id != old_role_id:
                await self.storage.delete(f"role-id/{self._hmac('role-id', old_role_id)}")
            return
        raise bad_request("the role is being changed concurrently; try again")

    async def _claim_role_id(self, role_id: str, role_key: str) -> None:
        """Role ids are unique across roles: the index entry is created only if absent. An
        entry left behind for this same role (a writer died between the index and the role)
        is taken over with CAS; one naming another role is never touched."""
        key = f"role-id/{self._hmac('role-id', role_id)}"
        for _ in range(5):
            try:
                await self.storage.create(key, role_key.encode())
                return
            except CasConflict:
                pass
            got = await self.storage.get_entry(key)
            if got is None:
                continue  # deleted meanwhile: try to create it again
            if got[0].decode() != role_key:
                break
            owner = await self.storage.get_obj(f"role/{role_key}", RoleEntry)
            if owner is not None and owner.role_id == role_id:
                return  # already ours
            try:
                await self.storage.update(key, role_key.encode(), got[1])
                return
            except CasConflict:
                continue
        raise bad_request("role_id already in use")

    def _role_data(self, role: RoleEntry) -> dict[str, Any]:
        data = token_data(role)
        data.update(
            bind_secret_id=role.bind_secret_id,
            secret_id_bound_cidrs=role.secret_id_bound_cidrs,
            secret_id_num_uses=role.secret_id_num_uses,
            secret_id_ttl=role.secret_id_ttl,
            local_secret_ids=role.local_secret_ids,
        )
        for old in role.legacy:
            data[old] = data[_ALIASES[old]]
        return data

    async def _delete_role(self, raw_name: str) -> None:
        got = await self._role(raw_name)
        if got is None:
            return
        role = got[0]
        for secret_hmac in await self.storage.list(f"secret-id/{role.uuid}/"):
            entry = await self.storage.get_obj(self._sid_key(role, secret_hmac), SecretIdEntry)
            if entry is not None:
                await self._forget_secret(role.uuid, secret_hmac, entry.accessor)
        if role.role_id:
            await self.storage.delete(f"role-id/{self._hmac('role-id', role.role_id)}")
        await self.storage.delete(f"role/{self._key(raw_name)}")

    # ---- secret ids ---------------------------------------------------------------------
    async def _issue(self, role: RoleEntry, f: SecretIdFields, secret_id: str) -> Response:
        if not role.bind_secret_id:
            raise bad_request("bind_secret_id is not set on the role")
        cidrs = parse_cidrs(f.cidr_list, "cidr_list")
        if not cidrs_subset(cidrs, role.secret_id_bound_cidrs):
            raise bad_request(
                "failed to verify the CIDR restrictions set on the secret ID: "
                "cidr_list must be within the role's secret_id_bound_cidrs"
            )
        token_cidrs = parse_cidrs(f.token_bound_cidrs, "token_bound_cidrs")
        if not cidrs_subset(token_cidrs, role.token_bound_cidrs):
            raise bad_request("token_bound_cidrs must be within the role's token_bound_cidrs")
        num_uses = role.secret_id_num_uses if f.num_uses is None else f.num_uses
        if num_uses < 0:
            raise bad_request("num_uses cannot be negative")
        if role.secret_id_num_uses and (num_uses == 0 or num_uses > role.secret_id_num_uses):
            raise bad_request("num_uses cannot be higher than the role's secret_id_num_uses")
        ttl = f.ttl or role.secret_id_ttl
        if ttl < 0:
            raise bad_request("ttl cannot be negative")
        if role.secret_id_ttl and ttl > role.secret_id_ttl:
            raise bad_request("ttl cannot be longer than the role's secret_id_ttl")
        now = time.time()
        accessor = str(uuid.uuid4())
        secret_hmac = self._hmac("secret-id", secret_id)
        entry = SecretIdEntry(
            hmac=secret_hmac,
            accessor=accessor,
            num_uses=num_uses,
            ttl=ttl,
            creation_time=now,
            expiration_time=now + ttl if ttl else 0.0,
            last_updated_time=now,
            metadata=_metadata(f.metadata),
            cidr_list=cidrs,
            token_bound_cidrs=token_cidrs,
        )
        try:
            await self.storage.create(self._sid_key(role, secret_hmac), msgspec.json.encode(entry))
        except CasConflict:
            raise bad_request("SecretID is already registered") from None
        await self.storage.put_obj(
            f"accessor/{self._hmac('accessor', accessor)}",
            AccessorRef(role_uuid=role.uuid, secret_hmac=secret_hmac),
        )
        return Response(
            data={
                "secret_id": secret_id,
                "secret_id_accessor": accessor,
                "secret_id_ttl": ttl,
                "secret_id_num_uses": num_uses,
            }
        )

    @staticmethod
    def _secret_data(entry: SecretIdEntry) -> dict[str, Any]:
        return {
            "secret_id_accessor": entry.accessor,
            "secret_id_num_uses": entry.num_uses,
            "secret_id_ttl": entry.ttl,
            "creation_time": _rfc3339(entry.creation_time),
            "expiration_time": _rfc3339(entry.expiration_time),
            "last_updated_time": _rfc3339(entry.last_updated_time),
            "metadata": entry.metadata,
            "cidr_list": entry.cidr_list,
            "token_bound_cidrs": entry.token_bound_cidrs,
        }

    async def _consume(self, role: RoleEntry, secret_id: str, remote_addr: str) -> SecretIdEntry:
        """Validate a secret id for a login and count one use (CAS); raises 400 when it is
        unknown, expired or used up."""
        secret_hmac = self._hmac("secret-id", secret_id)
        key = self._sid_key(role, secret_hmac)
        for _ in range(50):
            got = await self.storage.get_obj_entry(key, SecretIdEntry)
            if got is None:
                raise bad_request(INVALID_LOGIN)
            entry, rev = got
            if not equal(entry.hmac, secret_hmac):
                raise bad_request(INVALID_LOGIN)
            now = time.time()
            if entry.spent or entry.expired(now):
                await self._forget_secret(role.uuid, secret_hmac, entry.accessor)
                raise bad_request(INVALID_LOGIN)
            if not addr_allowed(remote_addr, entry.cidr_list):
                raise bad_request(
                    "source address unauthorized through CIDR restrictions on the secret ID"
                )
            if entry.num_uses == 0:
                return entry  # unlimited: nothing to count
            entry.num_uses -= 1
            entry.spent = entry.num_uses == 0
            entry.last_updated_time = now
            try:
                await self.storage.update(key, msgspec.json.encode(entry), rev)
            except CasConflict:
                await asyncio.sleep(0.002)
                continue  # another login used it meanwhile: re-read and decide again
            if entry.spent:
                await self._forget_secret(role.uuid, secret_hmac, entry.accessor)
            return entry
        raise SecretsError(503, "the secret ID is under heavy concurrent use; try again")

    # ---- paths --------------------------------------------------------------------------
    def build_paths(self) -> list[Path]:
        async def role_exists(req: Request, f: Any) -> bool:
            return await self._role(f.role_name) is not None

        async def list_roles(req: Request, _: NoFields) -> Response:
            return await list_prefix(self.storage, "role/")

        async def read_role(req: Request, f: RoleFields) -> Response:
            got = await self._role(f.role_name)
            if got is None:
                raise not_found()
            return Response(data=self._role_data(got[0]))

        async def write_role(req: Request, f: RoleFields) -> Response:
            await self._write_role(f)
            return Response()

        async def delete_role(req: Request, f: RoleFields) -> Response:
            await self._delete_role(f.role_name)
            return Response()

        async def read_role_id(req: Request, f: RoleIdFields) -> Response:
            got = await self._role(f.role_name)
            if got is None:
                raise not_found()
            return Response(data={"role_id": got[0].role_id})

        async def write_role_id(req: Request, f: RoleIdFields) -> Response:
            if not f.role_id.strip():
                raise bad_request("missing role_id")
            await self._write_role(
                RoleFields(role_name=f.role_name, role_id=f.role_id), must_exist=True
            )
            return Response()

        async def new_secret_id(req: Request, f: SecretIdFields) -> Response:
            role = await self._need_role(f.role_name)
            return await self._issue(role, f, str(uuid.uuid4()))

        async def custom_secret_id(req: Request, f: SecretIdFields) -> Response:
            if not f.secret_id:
                raise bad_request("missing secret_id")
            role = await self._need_role(f.role_name)
            return await self._issue(role, f, f.secret_id)

        async def list_secret_ids(req: Request, f: RoleName) -> Response:
            role = await self._need_role(f.role_name)
            keys = []
            for secret_hmac in await self.storage.list(f"secret-id/{role.uuid}/"):
                entry = await self.storage.get_obj(self._sid_key(role, secret_hmac), SecretIdEntry)
                if entry is not None and not entry.spent:
                    keys.append(entry.accessor)
            return listing(sorted(keys))

        async def lookup_secret_id(req: Request, f: SecretIdLookup) -> Response:
            if not f.secret_id:
                raise bad_request("missing secret_id")
            role = await self._need_role(f.role_name)
            secret_hmac = self._hmac("secret-id", f.secret_id)
            entry = await self.storage.get_obj(self._sid_key(role, secret_hmac), SecretIdEntry)
            if entry is None or entry.spent:
                return Response()  # Vault answers an unknown secret id with no content
            if entry.expired(time.time()):
                await self._forget_secret(role.uuid, secret_hmac, entry.accessor)
                raise bad_request("invalid secret id")
            return Response(data=self._secret_data(entry))

        async def destroy_secret_id(req: Request, f: SecretIdLookup) -> Response:
            if not f.secret_id:
                raise bad_request("missing secret_id")
            role = await self._need_role(f.role_name)
            secret_hmac = self._hmac("secret-id", f.secret_id)
            entry = await self.storage.get_obj(self._sid_key(role, secret_hmac), SecretIdEntry)
            if entry is not None:
                await self._forget_secret(role.uuid, secret_hmac, entry.accessor)
            return Response()

        async def lookup_accessor(req: Request, f: AccessorFields) -> Response:
            if not f.secret_id_accessor:
                raise bad_request("missing secret_id_accessor")
            role = await self._need_role(f.role_name)
            got = await self._secret_by_accessor(role, f.secret_id_accessor)
            if got is None or got[0].spent:
                raise not_found("failed to find accessor entry for secret_id_accessor")
            return Response(data=self._secret_data(got[0]))

        async def destroy_accessor(req: Request, f: AccessorFields) -> Response:
            if not f.secret_id_accessor:
                raise bad_request("missing secret_id_accessor")
            role = await self._need_role(f.role_name)
            got = await self._secret_by_accessor(role, f.secret_id_accessor)
            if got is None:
                raise bad_request("failed to find accessor entry for secret_id_accessor")
            await self._forget_secret(role.uuid, got[1], got[0].accessor)
            return Response()

        async def tidy(req: Request, _: NoFields) -> Response:
            now = time.time()
            removed = 0
            for role_key in await self.storage.list("role/"):
                role = await self.storage.get_obj(f"role/{role_key}", RoleEntry)
                if role is None:
                    continue
                for secret_hmac in await self.storage.list(f"secret-id/{role.uuid}/"):
                    entry = await self.storage.get_obj(
                        self._sid_key(role, secret_hmac), SecretIdEntry
                    )
                    if entry is not None and (entry.spent or entry.expired(now)):
                        await self._forget_secret(role.uuid, secret_hmac, entry.accessor)
                        removed += 1
            return Response(
                warnings=[
                    f"Tidy operation completed: removed {removed} expired or used secret IDs."
                ]
            )

        async def login(req: Request, f: LoginFields) -> Response:
            # Vault trims Go whitespace from both ids and nothing else: a NUL stays part of
            # the value, and the ids are then compared on their exact bytes.
            role_id = go_trim_space(f.role_id)
            secret_id = go_trim_space(f.secret_id)
            if not role_id:
                raise bad_request("missing role_id")
            ref = await self.storage.get(f"role-id/{self._hmac('role-id', role_id)}")
            role = None
            if ref is not None:
                got = await self.storage.get_obj_entry(f"role/{ref.decode()}", RoleEntry)
                role = got[0] if got else None
            if role is None or not equal(role.role_id, role_id):
                raise bad_request(INVALID_LOGIN)
            if not addr_allowed(req.remote_addr, role.secret_id_bound_cidrs):
                raise bad_request(
                    "source address unauthorized through CIDR restrictions on the role"
                )
            metadata: dict[str, str] = {}
            token_cidrs = role.token_bound_cidrs
            if role.bind_secret_id:
                if not secret_id:
                    raise bad_request("missing secret_id")
                entry = await self._consume(role, secret_id, req.remote_addr)
                metadata.update(entry.metadata)
                token_cidrs = entry.token_bound_cidrs or token_cidrs
            if not addr_allowed(req.remote_addr, token_cidrs):
                raise permission_denied()
            metadata["role_name"] = role.name
            auth = login_auth(
                role,
                req,
                display_name="",
                metadata=metadata,
                internal={"role_name": role.name},
                bound_cidrs=token_cidrs,
            )
            # As Vault: the role's entity alias is named by its role_id.
            auth.alias_name, auth.alias_metadata = role.role_id, dict(metadata)
            return Response(auth=auth)

        r = Operation
        paths = [
            Path(
                ("role", "role/"),
                {Op.LIST: r(list_roles, "List roles")},
                synopsis="List the roles.",
            ),
            Path(
                "role/{role_name}/role-id",
                {
                    Op.READ: r(read_role_id, "Read the role id"),
                    **write(write_role_id, "Set a custom role id"),
                },
                RoleIdFields,
                synopsis="The role id of a role.",
            ),
            Path(
                ("role/{role_name}/secret-id", "role/{role_name}/secret-id/"),
                {
                    Op.LIST: r(list_secret_ids, "List secret id accessors"),
                    **write(new_secret_id, "Generate a secret id"),
                },
                SecretIdFields,
                synopsis="Issue secret ids; list their accessors.",
            ),
            Path(
                "role/{role_name}/secret-id/lookup",
                write(lookup_secret_id, "Read a secret id's properties"),
                SecretIdLookup,
                synopsis="Read the properties of a secret id.",
            ),
            Path(
                "role/{role_name}/secret-id/destroy",
                {
                    **write(destroy_secret_id, "Destroy a secret id"),
                    Op.DELETE: r(destroy_secret_id, "Destroy a secret id"),
                },
                SecretIdLookup,
                synopsis="Destroy a secret id.",
            ),
            Path(
                "role/{role_name}/secret-id-accessor/lookup",
                write(lookup_accessor, "Read a secret id by accessor"),
                AccessorFields,
                synopsis="Read the properties of a secret id by its accessor.",
            ),
            Path(
                "role/{role_name}/secret-id-accessor/destroy",
                {
                    **write(destroy_accessor, "Destroy a secret id by accessor"),
                    Op.DELETE: r(destroy_accessor, "Destroy a secret id by accessor"),
                },
                AccessorFields,
                synopsis="Destroy a secret id by its accessor.",
            ),
            Path(
                "role/{role_name}/custom-secret-id",
                write(custom_secret_id, "Register a custom secret id"),
                SecretIdFields,
                synopsis="Register a secret id chosen by the caller.",
            ),
        ]
        paths += [self._field_path(*spec) for spec in _FIELD_PATHS]
        paths += [
            Path(
                "role/{role_name}",
                {
                    Op.READ: r(read_role, "Read a role"),
                    **write(write_role, "Create or update a role"),
                    Op.DELETE: r(delete_role, "Delete a role"),
                },
                RoleFields,
                exists=role_exists,
                synopsis="Manage roles.",
                description="At least one constraint (bind_secret_id, secret_id_bound_cidrs "
                "or token_bound_cidrs) must be enabled.",
            ),
            Path(
                "tidy/secret-id",
                write(tidy, "Remove expired secret ids"),
                synopsis="Remove expired and used-up secret ids.",
            ),
            Path(
                "login",
                write(login, "Log in", unauthenticated=True),
                LoginFields,
                synopsis="Log in with a role id and a secret id.",
            ),
        ]
        return paths

    def _field_path(self, suffix: str, field: str, inputs: tuple[str, ...]) -> Path:
        """role/<name>/<suffix>: read, set or reset one property (for fine-grained ACLs)."""
        defaults = RoleEntry(name="", role_id="", uuid="")

        async def read(req: Request, f: RoleFields) -> Response:
            got = await self._role(f.role_name)
            if got is None:
                raise not_found()
            data = self._role_data(got[0])
            return Response(data={n: data[n] for n in (field, *inputs) if n in data})

        async def update(req: Request, f: RoleFields) -> Response:
            given = {name: getattr(f, name) for name in inputs if getattr(f, name) is not None}
            if not given:
                raise bad_request(f"missing {inputs[0]}")
            await self._write_role(RoleFields(role_name=f.role_name, **given), must_exist=True)
            return Response()

        async def reset(req: Request, f: RoleFields) -> Response:
            if await self._role(f.role_name) is None:
                return Response()
            await self._write_role(
                RoleFields(role_name=f.role_name, **{field: getattr(defaults, field)}),
                must_exist=True,
            )
            return Response()

        ops: dict[Op, Operation] = {Op.READ: Operation(read, f"Read {field}")}
        if inputs:
            ops.update(write(update, f"Set {field}"))
            ops[Op.DELETE] = Operation(reset, f"Reset {field} to its default")
        return Path(
            f"role/{{role_name}}/{suffix}", ops, RoleFields, synopsis=f"The {field} of a role."
        )
