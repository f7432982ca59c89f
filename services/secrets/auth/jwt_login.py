"""From verified claims to a login: the alias name from the user claim, metadata from claim
mappings, the bound claims check, and the token the role grants."""

from __future__ import annotations

from typing import Any

from services.secrets.auth.jwt_claims import (
    ClaimError,
    check_bound_claims,
    group_names,
    mapped_metadata,
    user_name,
)
from services.secrets.auth.jwt_roles import JwtRole
from services.secrets.auth.token_params import login_auth
from services.secrets.errors import bad_request
from services.secrets.framework.request import AuthSpec, Request


def authorize(
    req: Request, role_name: str, role: JwtRole, claims: dict[str, Any], *, prefix: str = ""
) -> AuthSpec:
    """Raises a 400 (with `prefix` before the reason) when the claims do not qualify."""
    try:
        name = user_name(claims, role.user_claim, role.user_claim_json_pointer)
        metadata = mapped_metadata(role.claim_mappings, claims)
        groups = group_names(claims, role.groups_claim) if role.groups_claim else []
        check_bound_claims(role.bound_claims_type, role.bound_claims, claims)
    except ClaimError as exc:
        raise bad_request(f"{prefix}{exc}") from None
    metadata["role"] = role_name
    auth = login_auth(role, req, display_name=name, metadata=metadata, internal={"role": role_name})
    auth.alias_name = name
    auth.alias_metadata = dict(metadata)
    if groups:
        auth.internal["groups"] = ",".join(groups)
    if role.groups_claim:
        auth.group_aliases = groups
    return auth
