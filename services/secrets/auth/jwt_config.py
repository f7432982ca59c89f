"""Configuration of the jwt/oidc auth method: where the keys that sign accepted JWTs come from
(an OIDC discovery URL, a JWKS URL or static PEM keys) and the OIDC client for browser logins.

A write replaces the whole configuration and is checked first as OpenBao checks it: a
discovery URL must answer a discovery document for its own issuer, a JWKS URL a key set.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from services.secrets.auth.jwt_fetch import FetchError, fetch_json, ssl_context
from services.secrets.auth.jwt_verify import DEFAULT_ALGORITHMS, VerifyError, pem_keys
from services.secrets.errors import bad_request
from services.secrets.framework.fields import CommaList, desc

WELL_KNOWN = "/.well-known/openid-configuration"


class JwtConfig(msgspec.Struct, kw_only=True):
    oidc_discovery_url: str = ""
    oidc_discovery_ca_pem: str = ""
    oidc_client_id: str = ""
    oidc_client_secret: str = ""
    oidc_response_mode: str = ""
    oidc_response_types: list[str] = []
    jwks_url: str = ""
    jwks_ca_pem: str = ""
    jwt_validation_pubkeys: list[str] = []
    jwt_supported_algs: list[str] = []
    bound_issuer: str = ""
    default_role: str = ""
    namespace_in_state: bool = True
    provider_config: dict[str, Any] = {}

    def algorithms(self) -> list[str]:
        return self.jwt_supported_algs or DEFAULT_ALGORITHMS

    def is_oidc(self) -> bool:
        return bool(self.oidc_discovery_url and self.oidc_client_id)


class ConfigFields(msgspec.Struct, kw_only=True):
    oidc_discovery_url: Annotated[str, desc("the provider's issuer URL")] = ""
    oidc_discovery_ca_pem: Annotated[str, desc("CA certificates for the provider")] = ""
    oidc_client_id: Annotated[str, desc("the OAuth client ID")] = ""
    oidc_client_secret: Annotated[str, desc("the OAuth client secret")] = ""
    oidc_response_mode: Annotated[str, desc("query or form_post")] = ""
    oidc_response_types: Annotated[CommaList, desc("code (the default)")] = []
    jwks_url: Annotated[str, desc("a JWKS URL")] = ""
    jwks_ca_pem: Annotated[str, desc("CA certificates for the JWKS URL")] = ""
    jwt_validation_pubkeys: Annotated[CommaList, desc("PEM public keys")] = []
    jwt_supported_algs: Annotated[CommaList, desc("signing algorithms accepted")] = []
    bound_issuer: Annotated[str, desc("the iss value required")] = ""
    default_role: Annotated[str, desc("the role of logins that name none")] = ""
    namespace_in_state: Annotated[bool, desc("carry the namespace in the OIDC state")] | None = None
    provider_config: Annotated[dict[str, Any], desc("provider specific settings")] = {}


async def discover(url: str, ca_pem: str) -> dict[str, Any]:
    """The discovery document of issuer `url`; raises FetchError."""
    doc = await fetch_json(url.rstrip("/") + WELL_KNOWN, ca_pem)
    if doc.get("issuer") != url:
        raise FetchError(
            f"issuer did not match the issuer returned by provider, expected {url!r} "
            f"got {doc.get('issuer')!r}"
        )
    return doc


async def checked_config(f: ConfigFields, existing: JwtConfig | None) -> JwtConfig:
    sources = [bool(f.oidc_discovery_url), bool(f.jwks_url), bool(f.jwt_validation_pubkeys)]
    if sum(sources) != 1:
        raise bad_request(
            "exactly one of 'jwt_validation_pubkeys', 'jwks_url' or 'oidc_discovery_url' "
            "must be set"
        )
    if bool(f.oidc_client_id) != bool(f.oidc_client_secret):
        raise bad_request("both 'oidc_client_id' and 'oidc_client_secret' must be set for OIDC")
    if f.oidc_client_id and not f.oidc_discovery_url:
        raise bad_request("'oidc_discovery_url' must be set for OIDC")
    if f.provider_config:
        raise bad_request("provider_config is not supported")
    unknown = [a for a in f.jwt_supported_algs if a not in DEFAULT_ALGORITHMS]
    if unknown:
        raise bad_request(
            f"invalid jwt_supported_algs: unsupported signing algorithm {unknown[0]!r}"
        )
    types = f.oidc_response_types
    if any(t not in ("code", "id_token") for t in types):
        raise bad_request(f"invalid response_types {types}. 'code' and 'id_token' are allowed")
    if f.oidc_response_mode in ("", "query"):
        if "id_token" in types:
            raise bad_request("query response_mode may not be used with an id_token response_type")
    elif f.oidc_response_mode != "form_post":
        raise bad_request(f"invalid response_mode: {f.oidc_response_mode!r}")
    try:
        if f.oidc_discovery_url:
            if WELL_KNOWN.lstrip("/") in f.oidc_discovery_url:
                raise bad_request("'oidc_discovery_url' contains '.well-known' component")
            await discover(f.oidc_discovery_url, f.oidc_discovery_ca_pem)
        elif f.jwks_url:
            ssl_context(f.jwks_ca_pem)
            jwks = await fetch_json(f.jwks_url, f.jwks_ca_pem)
            if not isinstance(jwks.get("keys"), list):
                raise FetchError(f"{f.jwks_url!r} did not answer a key set")
        else:
            pem_keys(f.jwt_validation_pubkeys)
    except FetchError as exc:
        what = "oidc discovery URL" if f.oidc_discovery_url else "jwks URL"
        raise bad_request(f"error checking {what}: {exc}") from None
    except VerifyError as exc:
        raise bad_request(str(exc)) from None
    if f.namespace_in_state is not None:
        in_state = f.namespace_in_state
    else:
        in_state = existing.namespace_in_state if existing else True
    return JwtConfig(
        **{k: v for k, v in msgspec.structs.asdict(f).items() if k != "namespace_in_state"},
        namespace_in_state=in_state,
    )


def config_data(config: JwtConfig) -> dict[str, Any]:
    """The read view: everything but the client secret."""
    data = msgspec.structs.asdict(config)
    del data["oidc_client_secret"]
    return data
