"""PKI roles: `roles/{name}` CRUD, PATCH and LIST, with Vault's fields and defaults.

A role is the policy an issue or sign request is checked against: which names, which key types
and sizes, which usages, how long. It is validated when written so that a bad role fails at
write time with a message, not later at issue time.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any

import msgspec

from services.crypto.ops_x509 import EXT_KEY_USAGES, KEY_USAGES
from services.secrets.engines.pki.names import parse_other_san
from services.secrets.engines.pki.pem import parse_time, short_duration
from services.secrets.errors import bad_request, not_found
from services.secrets.framework.fields import CommaList, Duration, desc
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import Request, Response

if TYPE_CHECKING:
    from services.secrets.engines.pki.backend import PKIBackend

RSA_BITS = (2048, 3072, 4096)
DEFAULT_KEY_USAGE = ("DigitalSignature", "KeyAgreement", "KeyEncipherment")
EC_BITS = (224, 256, 384, 521)
_OID = re.compile(r"^[0-2](\.(0|[1-9][0-9]*))+$")
_ROLE_NAME = re.compile(r"\w(?:[\w.-]*\w)?")


class Role(msgspec.Struct, kw_only=True):
    """Both the request fields of `roles/{name}` and the stored role."""

    name: str
    issuer_ref: Annotated[str, desc("issuer id, name or `default`")] = "default"
    ttl: Annotated[Duration, desc("default lifetime of issued certificates")] = 0
    max_ttl: Annotated[Duration, desc("longest lifetime a request may ask for")] = 0
    allow_localhost: bool = True
    allowed_domains: CommaList = []
    allowed_domains_template: bool = False
    allow_bare_domains: bool = False
    allow_subdomains: bool = False
    allow_glob_domains: bool = False
    allow_wildcard_certificates: bool = True
    allow_any_name: bool = False
    enforce_hostnames: bool = True
    allow_ip_sans: bool = True
    allowed_uri_sans: CommaList = []
    allowed_uri_sans_template: bool = False
    allowed_other_sans: CommaList = []
    allowed_serial_numbers: CommaList = []
    allowed_user_ids: CommaList = []
    server_flag: bool = True
    client_flag: bool = True
    code_signing_flag: bool = False
    email_protection_flag: bool = False
    key_type: Annotated[str, desc("rsa, ec, ed25519, or any (sign only)")] = "rsa"
    key_bits: Annotated[int, desc("0 picks 2048 for rsa and 256 for ec")] = 0
    signature_bits: int = 0
    use_pss: bool = False
    key_usage: CommaList = msgspec.field(default_factory=lambda: list(DEFAULT_KEY_USAGE))
    ext_key_usage: CommaList = []
    ext_key_usage_oids: CommaList = []
    use_csr_common_name: bool = True
    use_csr_sans: bool = True
    ou: CommaList = []
    organization: CommaList = []
    country: CommaList = []
    locality: CommaList = []
    province: CommaList = []
    street_address: CommaList = []
    postal_code: CommaList = []
    generate_lease: bool = False
    no_store: bool = False
    require_cn: bool = True
    cn_validations: CommaList = msgspec.field(default_factory=lambda: ["email", "hostname"])
    policy_identifiers: CommaList = []
    basic_constraints_valid_for_non_ca: bool = False
    not_before_duration: Annotated[Duration, desc("backdating of NotBefore")] = 30
    not_after: Annotated[str, desc("fixed NotAfter, YYYY-MM-ddTHH:MM:SSZ")] = ""


def role_data(role: Role) -> dict[str, Any]:
    data = msgspec.to_builtins(role)
    data.pop("name", None)
    # The seed shows ttl and max_ttl as string durations ("6h").
    data["ttl"] = short_duration(role.ttl)
    data["max_ttl"] = short_duration(role.max_ttl)
    return data


def normalize(role: Role) -> Role:
    """Validate a role and resolve its defaults (key_bits 0 -> 2048...); 400 on anything bad."""
    kt = role.key_type.strip().lower()
    if kt == "ecdsa":
        kt = "ec"
    if kt not in ("rsa", "ec", "ed25519", "any"):
        raise bad_request(f"unknown key_type {role.key_type!r}: use rsa, ec, ed25519 or any")
    bits = role.key_bits
    if kt == "rsa":
        bits = bits or 2048
        if bits not in RSA_BITS:
            raise bad_request(
                f"unsupported bit length for RSA key: {bits} (use 2048, 3072 or 4096)"
            )
    elif kt == "ec":
        bits = bits or 256
        if bits not in EC_BITS:
            raise bad_request(
                f"unsupported bit length for EC key: {bits} (use 224, 256, 384 or 521)"
            )
    else:
        bits = 0
    sig = role.signature_bits or 256
    if sig not in (256, 384, 512):
        raise bad_request(f"unsupported signature_bits {role.signature_bits}: use 256, 384 or 512")
    known_ku = {k.lower() for k in KEY_USAGES} | {"nonrepudiation"}
    for ku in role.key_usage:
        if ku.strip().lower() not in known_ku:
            raise bad_request(f"unknown key_usage {ku!r}")
    known_eku = {k.lower() for k in EXT_KEY_USAGES}
    for eku in role.ext_key_usage:
        if eku.strip().lower() not in known_eku:
            raise bad_request(f"unknown ext_key_usage {eku!r}")
    for oid in [*role.ext_key_usage_oids, *role.policy_identifiers]:
        if not _OID.match(oid.strip()):
            raise bad_request(f"invalid OID {oid!r}")
    for entry in role.allowed_other_sans:
        if entry.strip() != "*":
            parse_other_san(entry)
    checks = [c.strip().lower() for c in role.cn_validations if c.strip()]
    for c in checks:
        if c not in ("email", "hostname", "disabled"):
            raise bad_request(
                f"unknown cn_validations value {c!r}: use email, hostname or disabled"
            )
    if "disabled" in checks and len(checks) > 1:
        raise bad_request("cn_validations value disabled must be used alone")
    if role.max_ttl and role.ttl > role.max_ttl:
        raise bad_request('"ttl" value must be less than "max_ttl" value')
    if role.ttl < 0 or role.max_ttl < 0 or role.not_before_duration < 0:
        raise bad_request("ttl, max_ttl and not_before_duration must not be negative")
    if role.not_after:
        parse_time(role.not_after, "not_after")
    for country in role.country:
        if len(country.strip()) != 2:
            raise bad_request(f"country {country!r} must be a two-letter code")
    return msgspec.structs.replace(
        role,
        key_type=kt,
        key_bits=bits,
        signature_bits=sig,
        cn_validations=checks,
        issuer_ref=role.issuer_ref or "default",
    )


def paths(b: PKIBackend) -> list[Path]:
    async def read(req: Request, f: Role) -> Response:
        role = await b.get_role(f.name)
        if role is None:
            raise not_found()
        return Response(data=role_data(role))

    async def save(req: Request, f: Role) -> Response:
        if not _ROLE_NAME.fullmatch(f.name):
            raise bad_request(f"invalid role name {f.name!r}")
        role = normalize(f)
        await check_issuer_ref(b, role)
        await b.cfg.put(f"role/{role.name}", role)
        return Response(data=role_data(role))

    async def patch(req: Request, f: Role) -> Response:
        existing = await b.get_role(f.name)
        if existing is None:
            raise not_found(f"no role named {f.name!r}")
        merged = msgspec.to_builtins(existing)
        given = msgspec.to_builtins(f)
        for key in req.data:
            if key in given:
                merged[key] = given[key]
        if "key_type" in req.data and "key_bits" not in req.data:
            merged["key_bits"] = 0  # the old type's size means nothing for the new type
        role = normalize(msgspec.convert(merged, Role))
        await check_issuer_ref(b, role)
        await b.cfg.put(f"role/{role.name}", role)
        return Response(data=role_data(role))

    async def delete(req: Request, f: Role) -> Response:
        await b.cfg.delete(f"role/{f.name}")
        return Response()

    async def listing(req: Request, f: NoFields) -> Response:
        keys = await b.cfg.list("role/")
        if not keys:
            raise not_found()
        return Response(data={"keys": keys})

    async def exists(req: Request, f: Role) -> bool:
        return await b.get_role(f.name) is not None

    return [
        Path(
            ("roles", "roles/"),
            {Op.LIST: Operation(listing, "List roles")},
            synopsis="List the roles of this mount.",
        ),
        Path(
            "roles/{name}",
            {
                Op.READ: Operation(read, "Read a role"),
                **write(save, "Create or replace a role"),
                Op.PATCH: Operation(patch, "Change some fields of a role"),
                Op.DELETE: Operation(delete, "Delete a role"),
            },
            Role,
            exists=exists,
            synopsis="Manage the policy certificates are issued under.",
        ),
    ]


async def check_issuer_ref(b: PKIBackend, role: Role) -> None:
    # A role naming an issuer that does not exist would only fail later, at issue time.
    if role.issuer_ref != "default":
        await b.issuers.resolve(role.issuer_ref)
