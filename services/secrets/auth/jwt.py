"""The jwt and oidc auth methods (Vault's vault-plugin-auth-jwt: one backend, mounted as `jwt`
or `oidc`). `login` takes a JWT signed by a key of the configured issuer; `oidc/auth_url` and
`oidc/callback` run the browser flow (oidc_flow.py). Configuration and roles live in the mount's
barrier storage; the OIDC client secret is never returned."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import msgspec

from services.secrets.auth.jwt_config import (
    ConfigFields,
    JwtConfig,
    checked_config,
    config_data,
)
from services.secrets.auth.jwt_fetch import FetchError
from services.secrets.auth.jwt_keys import KeySource
from services.secrets.auth.jwt_login import authorize
from services.secrets.auth.jwt_roles import JwtRole, RoleFields, role_data, updated_role
from services.secrets.auth.jwt_verify import Expected, VerifyError, verify
from services.secrets.auth.oidc_flow import AuthUrlFields, CallbackFields, OidcFlow
from services.secrets.auth.token_params import addr_allowed
from services.secrets.errors import bad_request, not_found, permission_denied
from services.secrets.framework.backend import Backend
from services.secrets.framework.fields import desc
from services.secrets.framework.listing import list_prefix
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import Request, Response

if TYPE_CHECKING:
    from services.secrets.core.barrier import BarrierView
    from services.secrets.core.mounts import MountEntry

CONFIG = "config"
ROLES = "role/"


class NameOnly(msgspec.Struct, kw_only=True):
    name: str


class LoginFields(msgspec.Struct, kw_only=True):
    role: Annotated[str, desc("the role to log in with (default_role if empty)")] = ""
    jwt: Annotated[str, desc("the signed JWT")] = ""


class JwtBackend(Backend):
    type_name = "jwt"
    is_auth = True
    help_text = (
        "Logins with JWTs and OIDC: tokens signed by a configured issuer log in at login; "
        "browsers log in through oidc/auth_url and oidc/callback."
    )

    def __init__(self, core: Any, mount: MountEntry | None, storage: BarrierView) -> None:
        self.keys = KeySource()
        self.flow = OidcFlow(self, storage)
        super().__init__(core, mount, storage)

    async def config(self) -> JwtConfig | None:
        return await self.storage.get_obj(CONFIG, JwtConfig)

    async def role(self, name: str) -> JwtRole | None:
        return await self.storage.get_obj(ROLES + name.lower(), JwtRole)

    async def verified(
        self, config: JwtConfig, token: str, expected: Expected, prefix: str
    ) -> dict[str, Any]:
        """The claims of `token`, refetching the provider's keys once if it was signed by a
        key not seen yet; raises a 400 starting with `prefix`."""
        try:
            try:
                return verify(token, await self.keys.keys(config), expected)
            except VerifyError as exc:
                if config.jwt_validation_pubkeys or "signature" not in str(exc):
                    raise
                return verify(token, await self.keys.keys(config, fresh=True), expected)
        except (VerifyError, FetchError) as exc:
            raise bad_request(f"{prefix}{exc}") from None

    def build_paths(self) -> list[Path]:
        async def read_config(req: Request, _: NoFields) -> Response:
            config = await self.config()
            if config is None:
                raise not_found()
            return Response(data=config_data(config))

        async def write_config(req: Request, f: ConfigFields) -> Response:
            config = await checked_config(f, await self.config())
            await self.storage.put_obj(CONFIG, config)
            return Response()

        async def role_exists(req: Request, f: RoleFields) -> bool:
            return await self.role(f.name) is not None

        async def write_role(req: Request, f: RoleFields) -> Response:
            role = updated_role(await self.role(f.name), f)
            await self.storage.put_obj(ROLES + f.name.lower(), role)
            return Response()

        async def read_role(req: Request, f: NameOnly) -> Response:
            role = await self.role(f.name)
            if role is None:
                raise not_found()
            return Response(data=role_data(role))

        async def delete_role(req: Request, f: NameOnly) -> Response:
            await self.storage.delete(ROLES + f.name.lower())
            return Response()

        async def list_roles(req: Request, _: NoFields) -> Response:
            return await list_prefix(self.storage, ROLES)

        async def login(req: Request, f: LoginFields) -> Response:
            config = await self.config()
            if config is None:
                raise bad_request("could not load configuration")
            role_name = (f.role or config.default_role).lower()
            if not role_name:
                raise bad_request("missing role")
            role = await self.role(role_name)
            if role is None:
                raise bad_request(f"role {role_name!r} could not be found")
            if role.role_type == "oidc":
                raise bad_request("role with oidc role_type is not allowed")
            if not f.jwt:
                raise bad_request("missing token")
            if not addr_allowed(req.remote_addr, role.token_bound_cidrs):
                raise permission_denied()
            expected = Expected(
                algorithms=config.algorithms(),
                issuer=config.bound_issuer,
                audiences=role.bound_audiences,
                subject=role.bound_subject,
                expiration_leeway=role.expiration_leeway,
                not_before_leeway=role.not_before_leeway,
                clock_skew_leeway=role.clock_skew_leeway,
            )
            claims = await self.verified(config, f.jwt, expected, "error validating token: ")
            if claims.get("aud") and not role.bound_audiences:
                raise bad_request("audience claim found in JWT but no audiences bound to the role")
            auth = authorize(req, role_name, role, claims, prefix="error validating claims: ")
            return Response(auth=auth)

        r = Operation
        return [
            Path(
                "config",
                {
                    Op.READ: r(read_config, "Read the configuration"),
                    **write(write_config, "Set it"),
                },
                ConfigFields,
                synopsis="Where the keys of accepted JWTs come from, and the OIDC client.",
            ),
            Path(
                ("role", "role/"),
                {Op.LIST: r(list_roles, "List roles")},
                synopsis="List the roles.",
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
                synopsis="Which JWTs may log in and the tokens they get.",
            ),
            Path(
                "login",
                write(login, "Log in with a JWT", unauthenticated=True),
                LoginFields,
                synopsis="Log in with a signed JWT.",
            ),
            Path(
                "oidc/auth_url",
                write(self.flow.auth_url, "Start an OIDC login", unauthenticated=True),
                AuthUrlFields,
                synopsis="The provider's authorization URL for a browser login.",
            ),
            Path(
                "oidc/callback",
                {
                    Op.READ: r(self.flow.callback, "Finish an OIDC login", unauthenticated=True),
                    **write(self.flow.callback, "Finish a form_post login", unauthenticated=True),
                },
                CallbackFields,
                synopsis="Where the provider sends the browser back.",
            ),
        ]
