"""Identity tokens (Vault's identity OIDC token issuer) under `identity/oidc/`.

Roles name a key and a claims template; `oidc/token/<role>` signs a JWT about the calling
token's entity, with the role's client ID as audience. Anyone can fetch the discovery document
and the JWKS (unauthenticated, as in OpenBao) and verify those tokens without asking Trellis;
`oidc/introspect` answers whether one is still valid and its entity still enabled.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import time
from typing import Annotated, Any
from urllib.parse import urlsplit

import jwt
import msgspec

from services.secrets.core.tokens import random_b62
from services.secrets.errors import bad_request, not_found
from services.secrets.framework.fields import CommaList, Duration, desc
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import RawResponse, Request, Response
from services.secrets.identity.access import EntityView, read_entity
from services.secrets.identity.oidc_keys import ALGORITHMS, sign, verifying_key
from services.secrets.identity.oidc_store import (
    CONFIG,
    DEFAULT_KEY,
    KEYS,
    ROLES,
    NamedKey,
    OidcConfig,
    OidcStore,
    Role,
)
from services.secrets.identity.oidc_template import TemplateError, claims

MIN_ROTATION = 60
DAY = 86400
# What a template is checked against when a role is written.
_EMPTY = EntityView(
    id="",
    name="",
    namespace_id="",
    metadata={},
    disabled=False,
    group_ids=[],
    group_names=[],
    aliases=[],
)


class ConfigFields(msgspec.Struct, kw_only=True):
    issuer: Annotated[str, desc("scheme, host and optional port of the issuer")] | None = None


class KeyFields(msgspec.Struct, kw_only=True):
    name: str
    rotation_period: Annotated[Duration, desc("how often the key rotates")] | None = None
    verification_ttl: Annotated[Duration, desc("how long a rotated key verifies")] | None = None
    algorithm: Annotated[str, desc("RS256, RS384, RS512, ES256, ES384, ES512 or EdDSA")] | None = (
        None
    )
    allowed_client_ids: (
        Annotated[CommaList, desc("role client IDs that may use the key")] | None
    ) = None


class RotateFields(msgspec.Struct, kw_only=True):
    name: str
    verification_ttl: Annotated[Duration, desc("overrides the key's verification_ttl")] | None = (
        None
    )


class RoleFields(msgspec.Struct, kw_only=True):
    name: str
    key: Annotated[str, desc("the named key that signs the role's tokens")] | None = None
    template: Annotated[str, desc("JSON claims template (may be base64)")] | None = None
    client_id: Annotated[str, desc("the tokens' audience; generated if unset")] | None = None
    ttl: Annotated[Duration, desc("lifetime of the tokens")] | None = None


class NameOnly(msgspec.Struct, kw_only=True):
    name: str


class IntrospectFields(msgspec.Struct, kw_only=True):
    token: Annotated[str, desc("the identity token to check")] = ""
    client_id: Annotated[str, desc("the audience the token must carry")] = ""


def _valid_issuer(issuer: str) -> bool:
    """Scheme, host and optional port only, as OpenBao requires."""
    try:
        u = urlsplit(issuer)
    except ValueError:
        return False
    return u.scheme in ("http", "https") and bool(u.netloc) and issuer == f"{u.scheme}://{u.netloc}"


def _decode_template(template: str) -> str:
    try:
        return base64.b64decode(template, validate=True).decode()
    except (binascii.Error, ValueError):
        return template


def _json(body: dict[str, Any] | list[Any]) -> Response:
    return Response(raw=RawResponse(200, msgspec.json.encode(body)))


class OidcIssuer:
    """The `oidc/` paths of one identity mount."""

    def __init__(self, backend: Any) -> None:
        self.store = OidcStore(backend.storage, backend.core)
        self.core = backend.core

    async def issuer(self, req: Request) -> str:
        base = (await self.store.config()).issuer or self.core.settings.api_addr
        return f"{base.rstrip('/')}/v1/{req.namespace.path}identity/oidc"

    async def _default_key(self) -> None:
        if await self.store.key_entry(DEFAULT_KEY) is not None:
            return
        signing = await self.store.new_version("RS256")
        upcoming = await self.store.new_version("RS256")
        fresh = NamedKey(
            allowed_client_ids=["*"],
            signing=signing,
            upcoming=upcoming,
            next_rotation=time.time() + DAY,
        )
        await self.store.change_key(DEFAULT_KEY, lambda k: fresh if k is None else None)

    async def jwks(self) -> list[dict[str, Any]]:
        """Public keys of every key a role uses (as OpenBao: unused keys are not published)."""
        names = {role.key for role in (await self.store.roles()).values()}
        now = time.time()
        out: list[dict[str, Any]] = []
        for name in sorted(names):
            key = await self.store.key(name)
            if key is not None:
                out.extend(k.public_jwk for k in key.public_keys(now))
        return out

    def paths(self) -> list[Path]:
        store = self.store

        async def read_config(req: Request, _: NoFields) -> Response:
            return Response(data={"issuer": (await store.config()).issuer})

        async def write_config(req: Request, f: ConfigFields) -> Response:
            if f.issuer is None:
                return Response()
            warnings = []
            if f.issuer:
                if not _valid_issuer(f.issuer):
                    raise bad_request(
                        "invalid issuer, which must include only a scheme, host, and optional "
                        "port (e.g. https://example.com:8200)"
                    )
                warnings.append(
                    'If "issuer" is set explicitly, all tokens must be validated against that '
                    'address. Setting issuer to "" restores the default, the api_addr.'
                )
            await store.storage.put_obj(CONFIG, OidcConfig(issuer=f.issuer))
            return Response(warnings=warnings)

        async def key_exists(req: Request, f: KeyFields) -> bool:
            return await store.key_entry(f.name) is not None

        async def write_key(req: Request, f: KeyFields) -> Response:
            got = await store.key_entry(f.name)
            base = got[0] if got else NamedKey(allowed_client_ids=[])
            changes: dict[str, Any] = {}
            for name in ("rotation_period", "verification_ttl", "allowed_client_ids"):
                if getattr(f, name) is not None:
                    changes[name] = getattr(f, name)
            if f.algorithm is not None:
                changes["algorithm"] = f.algorithm
            draft = msgspec.structs.replace(base, **changes)
            if draft.rotation_period < MIN_ROTATION:
                raise bad_request("rotation_period must be at least one minute")
            if draft.verification_ttl > 10 * draft.rotation_period:
                raise bad_request("verification_ttl cannot be longer than 10x rotation_period")
            if draft.algorithm not in ALGORITHMS:
                raise bad_request(f"unknown signing algorithm {draft.algorithm!r}")
            if got is not None:
                for role in (await store.roles()).values():
                    if role.key == f.name and role.ttl > draft.verification_ttl:
                        raise bad_request(
                            f"unable to update key {f.name!r} because it is currently referenced"
                            " by one or more roles with a token ttl greater than "
                            f"{draft.verification_ttl} seconds"
                        )
            # New material when the key is new or changes algorithm (generated before the CAS).
            fresh = None
            if got is None or draft.algorithm != base.algorithm:
                fresh = (
                    await store.new_version(draft.algorithm),
                    await store.new_version(draft.algorithm),
                )

            def change(current: NamedKey | None) -> NamedKey:
                start = current or NamedKey(allowed_client_ids=[])
                key = msgspec.structs.replace(start, **changes)
                now = time.time()
                if not key.next_rotation or now + key.rotation_period < key.next_rotation:
                    key = msgspec.structs.replace(key, next_rotation=now + key.rotation_period)
                if fresh is not None and (current is None or current.algorithm != key.algorithm):
                    # Tokens signed before an algorithm change still verify for verification_ttl.
                    old = [k for k in (key.signing, key.upcoming) if k is not None]
                    retired = [
                        *key.retired,
                        *(
                            msgspec.structs.replace(
                                k, private_pem="", expire_at=now + key.verification_ttl
                            )
                            for k in old
                        ),
                    ]
                    key = msgspec.structs.replace(
                        key, signing=fresh[0], upcoming=fresh[1], retired=retired
                    )
                return key

            await store.change_key(f.name, change)
            return Response()

        async def read_key(req: Request, f: NameOnly) -> Response:
            got = await store.key_entry(f.name)
            if got is None:
                raise not_found()
            key = got[0]
            return Response(
                data={
                    "rotation_period": key.rotation_period,
                    "verification_ttl": key.verification_ttl,
                    "algorithm": key.algorithm,
                    "allowed_client_ids": key.allowed_client_ids,
                }
            )

        async def delete_key(req: Request, f: NameOnly) -> Response:
            if f.name == DEFAULT_KEY:
                raise bad_request(f"deletion of key {DEFAULT_KEY!r} not allowed")
            users = sorted(n for n, r in (await store.roles()).items() if r.key == f.name)
            if users:
                raise bad_request(
                    f"unable to delete key {f.name!r} because it is currently referenced by "
                    f"these roles: {', '.join(users)}"
                )
            await store.storage.delete(KEYS + f.name)
            return Response()

        async def list_keys(req: Request, _: NoFields) -> Response:
            keys = await store.storage.list(KEYS)
            if not keys:
                raise not_found()
            return Response(data={"keys": keys})

        async def rotate_key(req: Request, f: RotateFields) -> Response:
            if await store.rotate(f.name, f.verification_ttl) is None:
                raise bad_request(f"no named key found at {f.name!r}")
            return Response()

        async def role_exists(req: Request, f: RoleFields) -> bool:
            return await store.role(f.name) is not None

        async def write_role(req: Request, f: RoleFields) -> Response:
            current = await store.role(f.name)
            key_name = f.key if f.key is not None else (current.key if current else "")
            if not key_name:
                raise bad_request("the key parameter is required")
            if key_name == DEFAULT_KEY:
                await self._default_key()
            template = current.template if current else ""
            if f.template is not None:
                template = _decode_template(f.template)
            if template:
                try:
                    claims(template, _EMPTY)
                except TemplateError as exc:
                    raise bad_request(str(exc)) from None
            ttl = f.ttl if f.ttl is not None else (current.ttl if current else DAY)
            got = await store.key_entry(key_name)
            if got is None:
                raise bad_request(f"cannot find key {key_name!r}")
            if ttl > got[0].verification_ttl:
                raise bad_request(
                    "a role's token ttl cannot be longer than the verification_ttl of the key "
                    "it references"
                )
            client_id = f.client_id or (current.client_id if current else "") or random_b62(26)
            role = Role(key=key_name, template=template, ttl=ttl, client_id=client_id)
            await store.storage.put_obj(ROLES + f.name, role)
            return Response()

        async def read_role(req: Request, f: NameOnly) -> Response:
            role = await store.role(f.name)
            if role is None:
                raise not_found()
            return Response(data=msgspec.structs.asdict(role))

        async def delete_role(req: Request, f: NameOnly) -> Response:
            await store.storage.delete(ROLES + f.name)
            return Response()

        async def list_roles(req: Request, _: NoFields) -> Response:
            keys = await store.storage.list(ROLES)
            if not keys:
                raise not_found()
            return Response(data={"keys": keys})

        async def token(req: Request, f: NameOnly) -> Response:
            role = await store.role(f.name)
            if role is None:
                raise bad_request(f"role {f.name!r} not found")
            key = await store.key(role.key)
            if key is None or key.signing is None:
                raise bad_request(f"key {role.key!r} not found")
            if not key.allows(role.client_id):
                raise bad_request(
                    f"the key {role.key!r} does not list the client ID of the role {f.name!r} "
                    "as an allowed client ID"
                )
            entity_id = req.token.entity_id if req.token is not None else ""
            entity = await read_entity(self.core, req.namespace, entity_id)
            if entity is None:
                raise bad_request("no entity associated with the request's token")
            warnings = []
            ttl = role.ttl
            if ttl > key.verification_ttl:
                ttl = key.verification_ttl
                warnings.append(
                    "a role's token ttl cannot be longer than the verification_ttl of the key "
                    f"it references, setting token ttl to {ttl}"
                )
            now = int(time.time())
            payload: dict[str, Any] = {
                "iss": await self.issuer(req),
                "namespace": req.namespace.id,
                "sub": entity.id,
                "aud": role.client_id,
                "exp": now + ttl,
                "iat": now,
            }
            # Checked on write; should an entity's values still break it, keep the base claims.
            with contextlib.suppress(TemplateError):
                payload = {**claims(role.template, entity), **payload}
            signed = sign(payload, key.signing, key.algorithm)
            return Response(
                data={"token": signed, "client_id": role.client_id, "ttl": role.ttl},
                warnings=warnings,
            )

        async def introspect(req: Request, f: IntrospectFields) -> Response:
            def verdict(error: str = "") -> Response:
                return _json({"active": False, "error": error} if error else {"active": True})

            try:
                header = jwt.get_unverified_header(f.token)
            except jwt.PyJWTError as exc:
                return verdict(f"error parsing token: {exc}")
            candidates = [k for k in await self.jwks() if k["kid"] == header.get("kid")]
            if not candidates:
                return verdict("unable to validate the token signature")
            jwk = candidates[0]
            try:
                decoded = jwt.decode(
                    f.token,
                    verifying_key(jwk),
                    algorithms=[jwk["alg"]],
                    issuer=await self.issuer(req),
                    audience=f.client_id or None,
                    options={"verify_aud": bool(f.client_id), "require": ["exp", "sub"]},
                )
            except jwt.InvalidSignatureError:
                return verdict("unable to validate the token signature")
            except jwt.PyJWTError as exc:
                return verdict(f"error validating claims: {exc}")
            found = await read_entity(self.core, req.namespace, str(decoded["sub"]))
            if found is None:
                return verdict("entity was not found")
            if found.disabled:
                return verdict("entity is disabled")
            return verdict()

        async def discovery(req: Request, _: NoFields) -> Response:
            issuer = await self.issuer(req)
            return _json(
                {
                    "issuer": issuer,
                    "jwks_uri": issuer + "/.well-known/keys",
                    "response_types_supported": ["id_token"],
                    "subject_types_supported": ["public"],
                    "id_token_signing_alg_values_supported": list(ALGORITHMS),
                }
            )

        async def keys(req: Request, _: NoFields) -> Response:
            return _json({"keys": await self.jwks()})

        r = Operation
        public = {Op.READ: r(discovery, "OIDC discovery document", unauthenticated=True)}
        return [
            Path(
                "oidc/config",
                {Op.READ: r(read_config, "Read the issuer"), **write(write_config, "Set it")},
                ConfigFields,
                synopsis="The issuer of identity tokens.",
            ),
            Path(
                "oidc/key/",
                {Op.LIST: r(list_keys, "List named keys")},
                synopsis="List the named keys.",
            ),
            Path(
                "oidc/key/{name}/rotate",
                write(rotate_key, "Rotate a named key"),
                RotateFields,
                synopsis="Rotate a named key now.",
            ),
            Path(
                "oidc/key/{name}",
                {
                    Op.READ: r(read_key, "Read a named key"),
                    **write(write_key, "Create or update a named key"),
                    Op.DELETE: r(delete_key, "Delete a named key"),
                },
                KeyFields,
                exists=key_exists,
                synopsis="Keys that sign identity tokens.",
            ),
            Path(
                "oidc/role/",
                {Op.LIST: r(list_roles, "List roles")},
                synopsis="List the roles.",
            ),
            Path(
                "oidc/role/{name}",
                {
                    Op.READ: r(read_role, "Read a role"),
                    **write(write_role, "Create or update a role"),
                    Op.DELETE: r(delete_role, "Delete a role"),
                },
                RoleFields,
                exists=role_exists,
                synopsis="Roles: a key, a claims template and a TTL for identity tokens.",
            ),
            Path(
                "oidc/token/{name}",
                {Op.READ: r(token, "Generate an identity token")},
                NameOnly,
                synopsis="A signed identity token for the caller's entity.",
            ),
            Path(
                "oidc/introspect",
                write(introspect, "Check an identity token"),
                IntrospectFields,
                synopsis="Whether an identity token is valid and active.",
            ),
            Path(
                "oidc/.well-known/openid-configuration",
                public,
                synopsis="The OIDC discovery document of the issuer.",
            ),
            Path(
                "oidc/.well-known/keys",
                {Op.READ: r(keys, "The issuer's public keys", unauthenticated=True)},
                synopsis="The JWKS: current, upcoming and not yet expired previous keys.",
            ),
        ]
