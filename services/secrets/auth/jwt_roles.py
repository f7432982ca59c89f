"""Roles of the jwt/oidc auth method: which JWTs may log in (bound audiences, subject and
claims), who they are (user and groups claims), what metadata they carry, and the tokens they
get (the common `token_*` parameters)."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from services.secrets.auth.token_params import TokenInput, TokenParams, apply_token_input
from services.secrets.errors import bad_request
from services.secrets.framework.durations import parse_duration
from services.secrets.framework.fields import CommaList, Duration, desc

# Metadata keys the method sets itself.
RESERVED_METADATA = ("role",)
CALLBACK_MODES = ("client", "direct", "device")
MAX_LEEWAY = 86400


class JwtRole(TokenParams, kw_only=True):
    role_type: str = "oidc"
    bound_audiences: list[str] = []
    user_claim: str = ""
    user_claim_json_pointer: bool = False
    bound_subject: str = ""
    bound_claims_type: str = "string"
    bound_claims: dict[str, Any] = {}
    claim_mappings: dict[str, str] = {}
    groups_claim: str = ""
    allowed_redirect_uris: list[str] = []
    oidc_scopes: list[str] = []
    verbose_oidc_logging: bool = False
    expiration_leeway: int = 0
    not_before_leeway: int = 0
    clock_skew_leeway: int = 0
    max_age: int = 0
    callback_mode: str = "client"


class RoleFields(TokenInput, kw_only=True):
    name: str
    role_type: Annotated[str, desc("jwt or oidc (the default)")] | None = None
    bound_audiences: Annotated[CommaList, desc("aud values accepted")] | None = None
    user_claim: Annotated[str, desc("the claim naming the user (entity alias)")] | None = None
    user_claim_json_pointer: Annotated[bool, desc("user_claim is a JSON pointer")] | None = None
    bound_subject: Annotated[str, desc("the sub value required")] | None = None
    bound_claims_type: Annotated[str, desc("string or glob")] | None = None
    bound_claims: Annotated[dict[str, Any], desc("claims and the values they must have")] | None = (
        None
    )
    claim_mappings: Annotated[dict[str, str], desc("claims copied into metadata")] | None = None
    groups_claim: Annotated[str, desc("the claim listing the user's groups")] | None = None
    allowed_redirect_uris: Annotated[CommaList, desc("redirect URIs of OIDC logins")] | None = None
    oidc_scopes: Annotated[CommaList, desc("scopes asked for besides openid")] | None = None
    verbose_oidc_logging: Annotated[bool, desc("log claims (debug aid)")] | None = None
    # Signed durations (-1 turns the leeway off), read by updated_role.
    expiration_leeway: Annotated[int | str, desc("exp leeway; 0 default, -1 none")] | None = None
    not_before_leeway: Annotated[int | str, desc("nbf leeway; 0 default, -1 none")] | None = None
    clock_skew_leeway: Annotated[int | str, desc("clock skew; 0 default, -1 none")] | None = None
    max_age: Annotated[Duration, desc("max age of the provider's authentication")] | None = None
    callback_mode: Annotated[str, desc("client (the default)")] | None = None
    # Deprecated names of token_* fields.
    policies: Annotated[CommaList, desc("deprecated: use token_policies")] | None = None
    ttl: Annotated[Duration, desc("deprecated: use token_ttl")] | None = None
    max_ttl: Annotated[Duration, desc("deprecated: use token_max_ttl")] | None = None
    period: Annotated[Duration, desc("deprecated: use token_period")] | None = None
    num_uses: Annotated[int, desc("deprecated: use token_num_uses")] | None = None
    bound_cidrs: Annotated[CommaList, desc("deprecated: use token_bound_cidrs")] | None = None


DEPRECATED = {
    "policies": "token_policies",
    "ttl": "token_ttl",
    "max_ttl": "token_max_ttl",
    "period": "token_period",
    "num_uses": "token_num_uses",
    "bound_cidrs": "token_bound_cidrs",
}
_PLAIN = (
    "role_type",
    "bound_audiences",
    "user_claim",
    "user_claim_json_pointer",
    "bound_subject",
    "bound_claims_type",
    "bound_claims",
    "claim_mappings",
    "groups_claim",
    "allowed_redirect_uris",
    "oidc_scopes",
    "verbose_oidc_logging",
    "expiration_leeway",
    "not_before_leeway",
    "clock_skew_leeway",
    "max_age",
    "callback_mode",
)


LEEWAYS = ("expiration_leeway", "not_before_leeway", "clock_skew_leeway")


def _leeway(name: str, value: int | str) -> int:
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise bad_request(f"error converting input for field {name!r}: {exc}") from None
    if not -1 <= seconds <= MAX_LEEWAY:
        raise bad_request(f"{name!r} must be -1 (none), 0 (the default) or up to a day")
    return seconds


def updated_role(current: JwtRole | None, f: RoleFields) -> JwtRole:
    """The role `f` writes over `current` (None: a new role); raises 400s as OpenBao does."""
    for name in LEEWAYS:
        value = getattr(f, name)
        if value is not None:
            setattr(f, name, _leeway(name, value))
    for old, new in DEPRECATED.items():
        if getattr(f, old) is not None:
            if getattr(f, new) is not None:
                raise bad_request(f"cannot specify both {old!r} and {new!r}")
            setattr(f, new, getattr(f, old))
    base = current or JwtRole()
    changes = apply_token_input(base, f)
    changes.update({k: getattr(f, k) for k in _PLAIN if getattr(f, k) is not None})
    if f.role_type is None and current is None:
        changes["role_type"] = "oidc"
    role = msgspec.structs.replace(base, **changes)
    if role.role_type not in ("jwt", "oidc"):
        raise bad_request(f"invalid 'role_type': {role.role_type}")
    if role.bound_claims_type not in ("string", "glob"):
        raise bad_request(f"invalid 'bound_claims_type': {role.bound_claims_type}")
    for value in role.bound_claims.values():
        items = value if isinstance(value, list) else [value]
        if role.bound_claims_type == "glob" and not all(isinstance(v, str) for v in items):
            raise bad_request(f"claim is not a string: {value!r}")
    targets = list(role.claim_mappings.values())
    for target in targets:
        if target in RESERVED_METADATA:
            raise bad_request(
                f"metadata key {target!r} is reserved and may not be a mapping destination"
            )
        if targets.count(target) > 1:
            raise bad_request(f"multiple keys are mapped to metadata key {target!r}")
    if not role.user_claim:
        raise bad_request("a user claim must be defined on the role")
    if role.callback_mode not in CALLBACK_MODES:
        raise bad_request(f"invalid 'callback_mode': {role.callback_mode}")
    if role.callback_mode != "client":
        raise bad_request("only the 'client' callback_mode is supported")
    if role.role_type == "oidc" and not role.allowed_redirect_uris:
        raise bad_request(
            "'allowed_redirect_uris' must be set if 'role_type' is 'oidc' or unspecified."
        )
    if role.role_type == "jwt" and not (
        role.bound_audiences or role.token_bound_cidrs or role.bound_subject or role.bound_claims
    ):
        raise bad_request("must have at least one bound constraint when creating/updating a role")
    return role


def role_data(role: JwtRole) -> dict[str, Any]:
    return msgspec.structs.asdict(role)
