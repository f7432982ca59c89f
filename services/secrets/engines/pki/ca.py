"""Creating issuers: generate a root (`root/generate/{type}`, `issuers/generate/root/{type}`,
`root/rotate/{type}`), generate an intermediate's key and CSR (`intermediate/generate/{type}`,
`issuers/generate/intermediate/{type}`), and import CA certificates and keys (`config/ca`,
`issuers/import/bundle`, `issuers/import/cert`, `intermediate/set-signed`).
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Annotated, Any

import msgspec

from services.secrets.engines.pki import certs, names, urls
from services.secrets.engines.pki.issue import other_sans_of
from services.secrets.engines.pki.issuers import check_name
from services.secrets.engines.pki.keys import checked_key_name, key_spec, new_key
from services.secrets.engines.pki.models import DEFAULT_USAGE, IssuerEntry, KeyEntry
from services.secrets.engines.pki.pem import (
    as_format,
    check_format,
    check_key_format,
    der_b64,
    der_bytes,
)
from services.secrets.engines.pki.ttl import validity
from services.secrets.errors import bad_request
from services.secrets.framework.fields import CommaList, Duration, desc
from services.secrets.framework.path import Path, write
from services.secrets.framework.request import Request, Response
from shared.name_constraints import NAME_CONSTRAINT_FIELDS

if TYPE_CHECKING:
    from services.secrets.engines.pki.backend import PKIBackend

TYPES = ("internal", "exported", "existing")


class SubjectFields(msgspec.Struct, kw_only=True):
    common_name: str = ""
    alt_names: CommaList = []
    ip_sans: CommaList = []
    uri_sans: CommaList = []
    other_sans: CommaList = []
    exclude_cn_from_sans: bool = False
    ou: CommaList = []
    organization: CommaList = []
    country: CommaList = []
    locality: CommaList = []
    province: CommaList = []
    street_address: CommaList = []
    postal_code: CommaList = []
    serial_number: Annotated[str, desc("the subject's serialNumber attribute")] = ""


class ConstraintFields(SubjectFields, kw_only=True):
    max_path_length: Annotated[int, desc("-1: no limit")] = -1
    permitted_dns_domains: CommaList = []
    excluded_dns_domains: CommaList = []
    permitted_ip_ranges: CommaList = []
    excluded_ip_ranges: CommaList = []
    permitted_email_addresses: CommaList = []
    excluded_email_addresses: CommaList = []
    permitted_uri_domains: CommaList = []
    excluded_uri_domains: CommaList = []
    ttl: Duration = 0
    not_after: str = ""
    not_before_duration: Duration = 30
    signature_bits: int = 0
    use_pss: bool = False
    format: str = "pem"


class RootFields(ConstraintFields, kw_only=True):
    exported: Annotated[str, desc("internal, exported or existing")]
    private_key_format: str = "der"
    key_type: str = "rsa"
    key_bits: int = 0
    key_name: str = ""
    key_ref: str = "default"
    issuer_name: str = ""
    managed_key_name: str = ""
    managed_key_id: str = ""


class IntermediateFields(SubjectFields, kw_only=True):
    exported: Annotated[str, desc("internal, exported or existing")]
    format: str = "pem"
    private_key_format: str = "der"
    key_type: str = "rsa"
    key_bits: int = 0
    key_name: str = ""
    key_ref: str = "default"
    signature_bits: int = 0
    add_basic_constraints: bool = False
    managed_key_name: str = ""
    managed_key_id: str = ""


class ImportFields(msgspec.Struct, kw_only=True):
    pem_bundle: str = ""


class SetSignedFields(msgspec.Struct, kw_only=True):
    certificate: str = ""


def check_type(kind: str, managed: bool) -> str:
    if kind == "kms" or managed:
        raise bad_request("managed keys (type kms) are not supported by this PKI engine")
    if kind not in TYPES:
        raise bad_request(f"invalid type {kind!r}: use internal, exported or existing")
    return kind


def subject_and_sans(req: Request, f: SubjectFields) -> tuple[dict[str, Any], dict[str, Any]]:
    """Subject and SANs of a CA certificate or CSR (no role: only syntax is checked)."""
    cn = f.common_name.strip()
    if not cn:
        raise bad_request("the common_name field is required")
    dns, emails = names.split_names(list(f.alt_names))
    if not f.exclude_cn_from_sans:
        if "@" in cn:
            emails.insert(0, cn)
        elif (ascii_cn := names.to_ascii(cn)) is not None and names.valid_hostname(ascii_cn):
            dns.insert(0, ascii_cn)
    subject = {
        "common_name": cn,
        "ou": list(f.ou),
        "organization": list(f.organization),
        "country": list(f.country),
        "locality": list(f.locality),
        "province": list(f.province),
        "street_address": list(f.street_address),
        "postal_code": list(f.postal_code),
        "serial_number": f.serial_number,
    }
    sans = {
        "dns": names.dedup(dns),
        "email": names.dedup(emails),
        "ip": names.check_ips(None, list(f.ip_sans)),
        "uri": names.check_uris(None, list(f.uri_sans)),
        "other": names.check_other_sans(None, other_sans_of(req, list(f.other_sans))),
    }
    return subject, sans


def constraints(f: ConstraintFields) -> dict[str, Any]:
    return {k: list(getattr(f, k)) for k in NAME_CONSTRAINT_FIELDS}


def issuer_from_info(issuer_id: str, info: dict[str, Any], key_id: str, name: str) -> IssuerEntry:
    usage = list(DEFAULT_USAGE)
    if info["key_usage"] and "CRLSign" not in info["key_usage"]:
        usage.remove("crl-signing")
    return IssuerEntry(
        id=issuer_id,
        name=name,
        key_id=key_id,
        certificate=info["certificate"],
        serial_number=info["serial_number"],
        subject=info["subject"],
        common_name=info["common_name"],
        not_before=info["not_before"],
        not_after=info["not_after"],
        is_ca=info["is_ca"],
        self_issued=info["self_issued"],
        max_path_length=info["max_path_length"],
        key_type=info["key_type"],
        key_bits=info["key_bits"],
        fingerprint=info["fingerprint"],
        cert_key_usage=info["key_usage"],
        ca_chain=[info["certificate"]],
        chain_self_signed=[info["self_issued"]],
        usage=usage,
        created=time.time(),
    )


async def generate_root(
    b: PKIBackend, req: Request, f: RootFields, *, default_name: str = ""
) -> Response:
    kind = check_type(f.exported, bool(f.managed_key_name or f.managed_key_id))
    fmt, key_fmt = check_format(f.format), check_key_format(f.private_key_format)
    subject, sans = subject_and_sans(req, f)
    issuer_name = (
        check_name(f.issuer_name or default_name, "issuer")
        if (f.issuer_name or default_name)
        else ""
    )
    if await b.issuers.name_taken(issuer_name):
        raise bad_request(f"issuer name {issuer_name!r} is already in use")
    existing: KeyEntry | None = None
    if kind == "existing":
        existing = await b.issuers.resolve_key(f.key_ref)
        key_type, key_bits = existing.key_type, existing.key_bits
    else:
        key_type, key_bits = key_spec(f.key_type, f.key_bits)
    key_name = await checked_key_name(b, f.key_name) if existing is None else existing.name
    mount_default, mount_max = b.mount_ttls()
    warnings: list[str] = []
    not_before, not_after = validity(
        now=int(time.time()),
        ttl=f.ttl,
        not_after=f.not_after,
        default_ttl=mount_default,
        max_ttl=mount_max,
        not_before_duration=f.not_before_duration,
        limit_name="mount's max lease TTL (tune the mount to allow longer)",
        warnings=warnings,
    )
    issuer_id = str(uuid.uuid4())
    placeholder = IssuerEntry(id=issuer_id, certificate="", serial_number="")
    spec = {
        "subject": subject,
        "sans": sans,
        "not_before": not_before,
        "not_after": not_after,
        "is_ca": True,
        "max_path_length": f.max_path_length,
        **constraints(f),
        "signature_bits": f.signature_bits,
        "use_pss": f.use_pss,
        **await urls.aia_for(b, placeholder),
    }
    if existing is not None:
        result = await b.crypto("x509_sign", {"private_key": existing.private_key, "cert": spec})
        key = existing
    else:
        result = await b.crypto(
            "x509_issue",
            {"key_type": key_type, "key_bits": key_bits, "cert": spec},
            slow=key_bits >= 4096,
        )
        key = await new_key(
            b, {**result, **{"fingerprint": result["info"]["fingerprint"]}}, key_name
        )
    entry = issuer_from_info(issuer_id, result["info"], key.id, issuer_name)
    await b.issuers.add(entry)
    await certs.store(b, result, issuer_id)
    await b.crls.rebuild(entry)
    data = certs.cert_data(result, None, fmt, key_format=key_fmt if kind == "exported" else None)
    data.pop("ca_chain", None)
    data.update(issuer_id=issuer_id, issuer_name=issuer_name, key_id=key.id, key_name=key.name)
    return Response(data=data, warnings=warnings)


async def generate_intermediate(b: PKIBackend, req: Request, f: IntermediateFields) -> Response:
    kind = check_type(f.exported, bool(f.managed_key_name or f.managed_key_id))
    fmt, key_fmt = check_format(f.format), check_key_format(f.private_key_format)
    subject, sans = subject_and_sans(req, f)
    args: dict[str, Any] = {
        "subject": subject,
        "sans": sans,
        "add_basic_constraints": f.add_basic_constraints,
        "signature_bits": f.signature_bits,
    }
    existing: KeyEntry | None = None
    if kind == "existing":
        existing = await b.issuers.resolve_key(f.key_ref)
        args["private_key"] = existing.private_key
        bits = existing.key_bits
    else:
        key_type, bits = key_spec(f.key_type, f.key_bits)
        args.update(key_type=key_type, key_bits=bits)
    key_name = await checked_key_name(b, f.key_name) if existing is None else existing.name
    result = await b.crypto("csr_create", args, slow=bits >= 4096)
    key = existing or await new_key(b, result, key_name)
    # Vault answers the CSR and the key's id (its name and type are at key/<id>).
    data: dict[str, Any] = {"csr": as_format(result["csr"], fmt), "key_id": key.id}
    if kind == "exported":
        key_pem = result["private_key_pkcs8"] if key_fmt == "pkcs8" else result["private_key"]
        data["private_key"] = der_b64(key_pem) if fmt == "der" else key_pem.strip()
        data["private_key_type"] = result["private_key_type"]
        if fmt == "pem_bundle":
            data["csr"] = result["private_key"].strip() + "\n" + result["csr"].strip()
    return Response(data=data)


async def import_bundle(b: PKIBackend, pem_bundle: str, *, allow_keys: bool) -> Response:
    if not pem_bundle.strip():
        raise bad_request("no PEM data given: pem_bundle (or certificate) is required")
    parsed = await b.crypto("bundle_parse", {"pem_bundle": pem_bundle})
    if not parsed["certificates"] and not parsed["keys"]:
        raise bad_request("no certificates or private keys found in the PEM bundle")
    if parsed["keys"] and not allow_keys:
        raise bad_request("private keys cannot be imported on this path; use issuers/import/bundle")
    for info in parsed["certificates"]:
        if not info["is_ca"]:
            raise bad_request(f"refusing to import non-CA certificate {info['subject']}")
    store = b.issuers
    keys_by_fp = {k.fingerprint: k for k in await store.all_keys()}
    imported_keys, existing_keys = [], []
    for key in parsed["keys"]:
        if key["fingerprint"] in keys_by_fp:
            existing_keys.append(keys_by_fp[key["fingerprint"]].id)
            continue
        entry = await new_key(b, {**key, "private_key_type": key["key_type"]}, "")
        keys_by_fp[entry.fingerprint] = entry
        imported_keys.append(entry.id)
    issuers_by_der = {der_bytes(i.certificate): i for i in await store.all()}
    imported, existing, mapping, new_entries = [], [], {}, []
    warnings = []
    for info in parsed["certificates"]:
        found = issuers_by_der.get(der_bytes(info["certificate"]))
        if found is not None:
            existing.append(found.id)
            if not found.key_id and info["fingerprint"] in keys_by_fp:
                found = msgspec.structs.replace(found, key_id=keys_by_fp[info["fingerprint"]].id)
                await store.save(found)
            mapping[found.id] = found.key_id
            continue
        key = keys_by_fp.get(info["fingerprint"])
        entry = issuer_from_info(str(uuid.uuid4()), info, key.id if key else "", "")
        if key is None:
            warnings.append(
                f"no private key in this mount matches issuer {entry.id} "
                f"({info['subject']}): it can be read but cannot sign"
            )
        entry.created = time.time() + len(new_entries) * 1e-6  # keep bundle order
        await store.save(entry)
        issuers_by_der[der_bytes(entry.certificate)] = entry
        new_entries.append(entry)
        imported.append(entry.id)
        mapping[entry.id] = entry.key_id
    if new_entries:
        cfg = await store.config()
        with_keys = [e for e in new_entries if e.key_id]
        if not cfg.default or (cfg.default_follows_latest_issuer and len(with_keys) == 1):
            cfg.default = (with_keys or new_entries)[0].id
            await store.save_config(cfg)
        await store.relink()
        for entry in with_keys:
            fresh = await store.get(entry.id)
            if fresh is not None and "crl-signing" in fresh.usage:
                await b.crls.rebuild(fresh)
    return Response(
        data={
            "imported_issuers": imported or None,
            "imported_keys": imported_keys or None,
            "mapping": mapping,
            "existing_issuers": existing or None,
            "existing_keys": existing_keys or None,
        },
        warnings=warnings,
    )


def paths(b: PKIBackend) -> list[Path]:
    async def root(req: Request, f: RootFields) -> Response:
        return await generate_root(b, req, f)

    async def rotate(req: Request, f: RootFields) -> Response:
        return await generate_root(b, req, f, default_name="next")

    async def intermediate(req: Request, f: IntermediateFields) -> Response:
        return await generate_intermediate(b, req, f)

    async def import_with_keys(req: Request, f: ImportFields) -> Response:
        return await import_bundle(b, f.pem_bundle, allow_keys=True)

    async def import_certs(req: Request, f: ImportFields) -> Response:
        return await import_bundle(b, f.pem_bundle, allow_keys=False)

    async def set_signed(req: Request, f: SetSignedFields) -> Response:
        return await import_bundle(b, f.certificate, allow_keys=False)

    return [
        Path(
            ("root/generate/{exported}", "issuers/generate/root/{exported}"),
            write(root, "Generate a root CA"),
            RootFields,
            synopsis="Generate a self-signed root CA (its key is returned only if exported).",
        ),
        Path(
            "root/rotate/{exported}",
            write(rotate, "Generate the next root CA"),
            RootFields,
            synopsis="Generate a new root beside the current one (named `next`).",
        ),
        Path(
            ("intermediate/generate/{exported}", "issuers/generate/intermediate/{exported}"),
            write(intermediate, "Generate an intermediate CSR"),
            IntermediateFields,
            synopsis="Generate a key and a CSR for an intermediate CA.",
        ),
        Path(
            "intermediate/set-signed",
            write(set_signed, "Import the signed intermediate"),
            SetSignedFields,
            synopsis="Import the signed intermediate certificate.",
        ),
        Path(
            ("config/ca", "issuers/import/bundle"),
            write(import_with_keys, "Import CA certificates and keys"),
            ImportFields,
            synopsis="Import a PEM bundle of CA certificates and private keys.",
        ),
        Path(
            "issuers/import/cert",
            write(import_certs, "Import CA certificates"),
            ImportFields,
            synopsis="Import a PEM bundle of CA certificates (no keys).",
        ),
    ]
