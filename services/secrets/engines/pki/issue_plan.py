"""What issuing under a role reads from the mount's configuration, derived once per configuration
generation (`ConfigCache.memo`) instead of decoded and rebuilt on every request: the role with
the CertSpec fields it alone fixes, the issuer with the signer material it hands the crypto
worker, the issuer's AIA URLs, and all three encoded as the arguments a leaf's crypto call sends
by reference. Every value here is shared by concurrent requests: read only.

Each piece is looked up where the request used to read it, so a request that several things are
wrong with is still refused for the same one first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from services.crypto.shared_args import SharedArgs
from services.secrets.engines.pki import urls

if TYPE_CHECKING:
    from services.secrets.engines.pki.backend import PKIBackend
    from services.secrets.engines.pki.models import IssuerEntry
    from services.secrets.engines.pki.roles import Role


@dataclass(frozen=True, slots=True)
class RoleView:
    role: Role
    subject: dict[str, list[str]]  # the attributes the role sets (the request gives the CN)
    fixed: dict[str, Any]  # the CertSpec fields every leaf of the role carries


def set_only(fields: dict[str, Any]) -> dict[str, Any]:
    """`fields` without the empty ones: every CertSpec default is empty (false, 0, "", []), so
    the crypto worker reads the same spec from a shorter message."""
    return {k: v for k, v in fields.items() if v}


@dataclass(frozen=True, slots=True)
class IssuerView:
    issuer: IssuerEntry
    signer: dict[str, str]


def role_ext_key_usage(role: Role) -> list[str]:
    out = [
        name
        for name, on in (
            ("ServerAuth", role.server_flag),
            ("ClientAuth", role.client_flag),
            ("CodeSigning", role.code_signing_flag),
            ("EmailProtection", role.email_protection_flag),
        )
        if on
    ]
    return out + [e for e in role.ext_key_usage if e not in out]


async def role_view(b: PKIBackend, name: str) -> RoleView:
    """The role `name`; 400 when there is none."""

    async def build() -> RoleView:
        role = await b.require_role(name)
        subject = {
            "ou": list(role.ou),
            "organization": list(role.organization),
            "country": list(role.country),
            "locality": list(role.locality),
            "province": list(role.province),
            "street_address": list(role.street_address),
            "postal_code": list(role.postal_code),
        }
        fixed = {
            "key_usage": list(role.key_usage),
            "ext_key_usage": role_ext_key_usage(role),
            "ext_key_usage_oids": list(role.ext_key_usage_oids),
            "policy_identifiers": list(role.policy_identifiers),
            "basic_constraints_valid_for_non_ca": role.basic_constraints_valid_for_non_ca,
            "signature_bits": role.signature_bits,
            "use_pss": role.use_pss,
        }
        return RoleView(role, set_only(subject), set_only(fixed))

    return await b.cfg.memo(("role", name), build)


async def issuer_view(b: PKIBackend, ref: str) -> IssuerView:
    """The issuer `ref` names and what it signs with; 400 when it cannot issue."""

    async def build() -> IssuerView:
        issuer = await b.issuers.resolve(ref)
        return IssuerView(issuer, await b.issuers.signer(issuer))

    return await b.cfg.memo(("issuer", ref), build)


async def aia(b: PKIBackend, issuer: IssuerEntry) -> dict[str, list[str]]:
    """`urls.aia_for(issuer)` (its set fields), once per generation."""

    async def build() -> dict[str, list[str]]:
        return set_only(await urls.aia_for(b, issuer))

    return await b.cfg.memo(("aia", issuer.id), build)


async def shared_args(b: PKIBackend, name: str, view: RoleView, signing: IssuerView) -> SharedArgs:
    """What every leaf of role `name` signed by `signing` carries (the signer, the role's fixed
    CertSpec fields, the issuer's URLs), encoded once per generation for the crypto workers to
    hold by digest."""

    async def build() -> tuple[RoleView, IssuerView, SharedArgs]:
        cert = {**view.fixed, **await aia(b, signing.issuer)}
        return view, signing, SharedArgs.of({"signer": signing.signer, "cert": cert})

    held = await b.cfg.memo(("shared", name, signing.issuer.id), build)
    if held[0] is not view or held[1] is not signing:
        # Built from another generation's role or issuer than this request's (a change landed in
        # between): the signer must be the one whose issuer the response names.
        held = await build()
    return held[2]
