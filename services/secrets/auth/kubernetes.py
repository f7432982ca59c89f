"""The `kubernetes` auth method: pods log in with their service-account JWT.

A login checks the JWT's claims against the role (service account names and namespaces,
audience; signature too when `pem_keys` are configured), then asks the cluster's TokenReview
API whether the token is still valid and whom it belongs to; the answer must agree with the
claims. The reviewer JWT of the config is kept in the barrier and never returned."""

from __future__ import annotations

import re
from pathlib import Path as FsPath
from typing import TYPE_CHECKING, Annotated, Any

import msgspec
import structlog

from services.secrets.auth.kubernetes_jwt import (
    JwtError,
    ServiceAccount,
    parse_public_key,
    validated_claims,
)
from services.secrets.auth.kubernetes_review import ReviewError, TlsContexts, review
from services.secrets.auth.stored import change
from services.secrets.auth.token_params import (
    TokenInput,
    TokenParams,
    addr_allowed,
    apply_token_input,
    login_auth,
    take_deprecated,
    token_data,
)
from services.secrets.errors import (
    SecretsError,
    bad_request,
    not_found,
    permission_denied,
    unsupported_path,
)
from services.secrets.framework.backend import Backend
from services.secrets.framework.fields import CommaList, Duration, desc
from services.secrets.framework.listing import list_prefix
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import Request, Response
from services.secrets.globs import glob

if TYPE_CHECKING:
    from services.secrets.core.barrier import BarrierView
    from services.secrets.core.mounts import MountEntry

log = structlog.get_logger("auth.kubernetes")

_NAME = re.compile(r"\w(?:[\w.-]*\w)?")
MAX_NAME_BYTES = 256
# Where a pod finds its own service account (used unless disable_local_ca_jwt).
LOCAL_CA = FsPath("/var/run/secrets/kubernetes.io/serviceaccount/ca.crt")
LOCAL_JWT = FsPath("/var/run/secrets/kubernetes.io/serviceaccount/token")
ALIAS_SOURCES = ("serviceaccount_uid", "serviceaccount_name")
_ALIASES = {
    "policies": "token_policies",
    "num_uses": "token_num_uses",
    "ttl": "token_ttl",
    "max_ttl": "token_max_ttl",
    "period": "token_period",
    "bound_cidrs": "token_bound_cidrs",
}


class KubeConfig(msgspec.Struct, kw_only=True):
    kubernetes_host: str
    kubernetes_ca_cert: str = ""
    token_reviewer_jwt: str = ""
    pem_keys: list[str] = []
    issuer: str = ""
    disable_iss_validation: bool = True
    disable_local_ca_jwt: bool = False


class ConfigFields(msgspec.Struct, kw_only=True):
    kubernetes_host: Annotated[str, desc("URL of the Kubernetes API server")] = ""
    kubernetes_ca_cert: Annotated[str, desc("PEM CA certificate of the API server")] = ""
    token_reviewer_jwt: Annotated[str, desc("bearer token for the TokenReview API")] = ""
    pem_keys: Annotated[CommaList, desc("PEM keys that verify service-account JWTs")] = []
    issuer: Annotated[str, desc("deprecated: expected JWT issuer")] = ""
    disable_iss_validation: Annotated[bool, desc("deprecated: skip the issuer check")] = True
    disable_local_ca_jwt: Annotated[bool, desc("never use the pod's own CA and JWT")] = False


class RoleEntry(TokenParams, kw_only=True):
    bound_service_account_names: list[str] = []
    bound_service_account_namespaces: list[str] = []
    audience: str = ""
    alias_name_source: str = "serviceaccount_uid"
    legacy: list[str] = []


class RoleFields(TokenInput, kw_only=True):
    name: str
    bound_service_account_names: Annotated[CommaList, desc("service account names, or *")] | (
        None
    ) = None
    bound_service_account_namespaces: Annotated[CommaList, desc("namespaces, or *")] | None = None
    audience: Annotated[str, desc("audience the JWT must carry")] | None = None
    alias_name_source: Annotated[str, desc("serviceaccount_uid or serviceaccount_name")] | None = (
        None
    )
    policies: Annotated[CommaList, desc("deprecated: use token_policies")] | None = None
    num_uses: Annotated[int, desc("deprecated: use token_num_uses")] | None = None
    ttl: Annotated[Duration, desc("deprecated: use token_ttl")] | None = None
    max_ttl: Annotated[Duration, desc("deprecated: use token_max_ttl")] | None = None
    period: Annotated[Duration, desc("deprecated: use token_period")] | None = None
    bound_cidrs: Annotated[CommaList, desc("deprecated: use token_bound_cidrs")] | None = None


class LoginFields(msgspec.Struct, kw_only=True):
    role: Annotated[str, desc("the role to log in with")] = ""
    jwt: Annotated[str, desc("the service account JWT")] = ""


def _name(raw: str) -> str:
    name = raw.strip().lower()
    if not _NAME.fullmatch(name):
        raise unsupported_path(raw)
    if len(name.encode()) > MAX_NAME_BYTES:
        raise bad_request(f"name must be at most {MAX_NAME_BYTES} bytes")
    return name


def _check_wildcard(values: list[str]) -> None:
    if len(values) > 1 and "*" in values:
        raise bad_request('can not mix "*" with values')


def _allowed(patterns: list[str], value: str) -> bool:
    if patterns == ["*"]:
        return True
    return any(glob(p, value) for p in patterns)


def _local(path: FsPath) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


class KubernetesBackend(Backend):
    type_name = "kubernetes"
    is_auth = True
    help_text = (
        "Kubernetes service account logins. Configure the API server at config, bind service "
        "accounts to policies with roles under role/, and log in at login with role and jwt."
    )

    def __init__(self, core: Any, mount: MountEntry | None, storage: BarrierView) -> None:
        super().__init__(core, mount, storage)
        self._tls = TlsContexts()

    async def _config(self) -> KubeConfig | None:
        return await self.storage.get_obj("config", KubeConfig)

    async def _role(self, name: str) -> RoleEntry | None:
        return await self.storage.get_obj(f"role/{name}", RoleEntry)

    async def _login(self, req: Request, f: LoginFields) -> Response:
        if not f.role:
            raise bad_request("missing role")
        if not f.jwt:
            raise bad_request("missing jwt")
        role_name = f.role.strip().lower()
        role = await self._role(role_name) if _NAME.fullmatch(role_name) else None
        if role is None:
            raise bad_request(f'invalid role name "{f.role[:MAX_NAME_BYTES]}"')
        if not addr_allowed(req.remote_addr, role.token_bound_cidrs):
            raise permission_denied()
        config = await self._config()
        if config is None:
            raise bad_request("could not load backend configuration")
        try:
            keys = [parse_public_key(k) for k in config.pem_keys]
            issuer = "" if config.disable_iss_validation else config.issuer
            claims = validated_claims(f.jwt, keys, issuer=issuer, audience=role.audience)
        except JwtError as exc:
            raise SecretsError(403, str(exc)) from None
        account = ServiceAccount.from_claims(claims)
        if not _allowed(role.bound_service_account_names, account.name):
            raise SecretsError(403, "service account name not authorized")
        if not _allowed(role.bound_service_account_namespaces, account.namespace):
            raise SecretsError(403, "namespace not authorized")
        if not account.uid:
            raise SecretsError(403, "could not parse UID from claims")
        if role.alias_name_source == "serviceaccount_name":
            alias = f"{account.namespace}/{account.name}"
        else:
            alias = account.uid
        local = not config.disable_local_ca_jwt
        ca = config.kubernetes_ca_cert or (_local(LOCAL_CA) if local else "")
        bearer = config.token_reviewer_jwt or (_local(LOCAL_JWT).strip() if local else "")
        wanted = [role.audience] if role.audience else list(account.audiences)
        try:
            seen = await review(
                config.kubernetes_host, self._tls.get(ca), bearer or f.jwt, f.jwt, wanted
            )
            if (seen.name, seen.uid, seen.namespace) != (
                account.name,
                account.uid,
                account.namespace,
            ):
                raise ReviewError("lookup failed: the review names another service account")
        except ReviewError as exc:
            log.info("kubernetes login refused", mount=req.mount_path, reason=str(exc))
            raise permission_denied() from None
        meta = {
            "service_account_uid": account.uid,
            "service_account_name": account.name,
            "service_account_namespace": account.namespace,
            "service_account_secret_name": account.secret_name,
            "role": role_name,
        }
        auth = login_auth(
            role,
            req,
            display_name=f"{account.namespace}-{account.name}",
            metadata=meta,
            internal={"role": role_name},
        )
        auth.alias_name = alias
        auth.alias_metadata = {k: v for k, v in meta.items() if k != "role"}
        return Response(auth=auth)

    def build_paths(self) -> list[Path]:
        async def read_config(req: Request, _: NoFields) -> Response:
            config = await self._config()
            if config is None:
                raise not_found()
            data = msgspec.structs.asdict(config)
            data["token_reviewer_jwt_set"] = bool(data.pop("token_reviewer_jwt"))
            return Response(data=data)

        async def write_config(req: Request, f: ConfigFields) -> Response:
            if not f.kubernetes_host:
                raise bad_request("no host provided")
            if f.disable_local_ca_jwt and not f.kubernetes_ca_cert:
                raise bad_request(
                    "kubernetes_ca_cert must be given when disable_local_ca_jwt is true"
                )
            ca = f.kubernetes_ca_cert
            if ca and not ("-----BEGIN " in ca and "-----END " in ca):
                raise bad_request("kubernetes_ca_cert must be PEM encoded")
            for pem in f.pem_keys:
                try:
                    parse_public_key(pem)
                except JwtError as exc:
                    raise bad_request(str(exc)) from None
            await self.storage.put_obj("config", KubeConfig(**msgspec.structs.asdict(f)))
            return Response()

        async def role_exists(req: Request, f: RoleFields) -> bool:
            return await self._role(_name(f.name)) is not None

        async def list_roles(req: Request, _: NoFields) -> Response:
            return await list_prefix(self.storage, "role/")

        async def read_role(req: Request, f: RoleFields) -> Response:
            role = await self._role(_name(f.name))
            if role is None:
                raise not_found()
            data: dict[str, Any] = {
                "bound_service_account_names": role.bound_service_account_names,
                "bound_service_account_namespaces": role.bound_service_account_namespaces,
                "bound_service_account_namespace_selector": "",
            }
            if role.audience:
                data["audience"] = role.audience
            data.update(token_data(role))
            for old in role.legacy:
                data[old] = data[_ALIASES[old]]
            data["alias_name_source"] = role.alias_name_source
            return Response(data=data)

        async def write_role(req: Request, f: RoleFields) -> Response:
            name = _name(f.name)
            used, dropped = take_deprecated(
                f, {old: (new, getattr(f, old)) for old, new in _ALIASES.items()}
            )

            def apply(current: RoleEntry | None) -> RoleEntry:
                base = current or RoleEntry()
                changes = apply_token_input(base, f)
                if f.bound_service_account_names is not None:
                    changes["bound_service_account_names"] = f.bound_service_account_names
                if f.bound_service_account_namespaces is not None:
                    changes["bound_service_account_namespaces"] = f.bound_service_account_namespaces
                if f.audience is not None:
                    changes["audience"] = f.audience
                if f.alias_name_source is not None:
                    changes["alias_name_source"] = f.alias_name_source or "serviceaccount_uid"
                new = msgspec.structs.replace(
                    base, legacy=sorted((set(base.legacy) - dropped) | used), **changes
                )
                if not new.bound_service_account_names:
                    raise bad_request('"bound_service_account_names" can not be empty')
                _check_wildcard(new.bound_service_account_names)
                if not new.bound_service_account_namespaces:
                    raise bad_request(
                        '"bound_service_account_namespaces" can not be empty if '
                        '"bound_service_account_namespace_selector" is not set'
                    )
                _check_wildcard(new.bound_service_account_namespaces)
                if new.alias_name_source not in ALIAS_SOURCES:
                    raise bad_request(
                        "invalid alias_name_source, must be one of: " + ", ".join(ALIAS_SOURCES)
                    )
                return new

            await change(self.storage, f"role/{name}", RoleEntry, apply)
            return Response()

        async def delete_role(req: Request, f: RoleFields) -> Response:
            await self.storage.delete(f"role/{_name(f.name)}")
            return Response()

        async def login(req: Request, f: LoginFields) -> Response:
            return await self._login(req, f)

        r = Operation
        return [
            Path(
                "config",
                {
                    Op.READ: r(read_config, "Read the Kubernetes API configuration"),
                    **write(write_config, "Configure the Kubernetes API"),
                },
                ConfigFields,
                synopsis="Configures the Kubernetes API server and JWT verification.",
                description="The reviewer JWT is stored encrypted and never returned: a read "
                "says only whether one is set (token_reviewer_jwt_set).",
            ),
            Path(
                ("role", "role/"),
                {Op.LIST: r(list_roles, "List roles")},
                synopsis="Lists the roles of this method.",
            ),
            Path(
                "role/{name}",
                {
                    Op.READ: r(read_role, "Read a role"),
                    **write(write_role, "Create or update a role"),
                    Op.DELETE: r(delete_role, "Delete a role"),
                },
                RoleFields,
                exists=role_exists,
                synopsis="Bind service accounts to token policies and settings.",
            ),
            Path(
                "login",
                write(login, "Log in with a service account JWT", unauthenticated=True),
                LoginFields,
                synopsis="Authenticates Kubernetes service accounts.",
                description="The JWT is checked against the role, then reviewed by the "
                "cluster's TokenReview API.",
            ),
        ]
