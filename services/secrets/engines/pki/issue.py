"""Issue (new key pair) and sign (caller's CSR) under a role: `issue/{name}`,
`issuer/{issuer_ref}/issue/{name}`, `sign/{name}`, `issuer/{issuer_ref}/sign/{name}`.

Every requested name is checked against the role before any crypto work; the certificate is then
built on a crypto worker in one call (key generation and signing together).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any

import msgspec

from services.secrets.engines.pki import certs, issue_plan, names
from services.secrets.engines.pki.keys import key_spec
from services.secrets.engines.pki.pem import check_format, check_key_format
from services.secrets.engines.pki.ttl import limit_to_issuer, validity
from services.secrets.errors import bad_request
from services.secrets.framework.fields import CommaList, Duration, desc
from services.secrets.framework.path import Path, write
from services.secrets.framework.request import Request, Response
from shared import jsonbody

if TYPE_CHECKING:
    from services.secrets.engines.pki.backend import PKIBackend
    from services.secrets.engines.pki.issue_plan import RoleView
    from services.secrets.engines.pki.models import IssuerEntry
    from services.secrets.engines.pki.roles import Role


class IssueFields(msgspec.Struct, kw_only=True):
    name: Annotated[str, desc("the role")]
    issuer_ref: str = ""
    common_name: str = ""
    alt_names: Annotated[CommaList, desc("DNS names and email addresses")] = []
    ip_sans: CommaList = []
    uri_sans: CommaList = []
    other_sans: Annotated[CommaList, desc("<oid>;UTF8:<value> entries")] = []
    ttl: Duration = 0
    format: Annotated[str, desc("pem, der or pem_bundle")] = "pem"
    private_key_format: Annotated[str, desc("der or pkcs8")] = "der"
    exclude_cn_from_sans: bool = False
    not_after: Annotated[str, desc("YYYY-MM-ddTHH:MM:SSZ")] = ""
    remove_roots_from_chain: bool = False
    user_ids: CommaList = []
    serial_number: Annotated[str, desc("the subject's serialNumber attribute")] = ""
    key_type: Annotated[str, desc("only when the role's key_type is any")] = ""
    key_bits: int = 0
    csr: Annotated[str, desc("PEM CSR (sign only)")] = ""


def other_sans_of(req: Request, parsed: list[str]) -> list[str]:
    """other_sans may also be a JSON array in a string."""
    raw = req.data.get("other_sans")
    if isinstance(raw, str) and raw.strip().startswith("["):
        try:
            value = jsonbody.loads(raw)
        except ValueError:
            raise bad_request(
                "other_sans is neither a comma-separated list nor a JSON array"
            ) from None
        if isinstance(value, list):
            return [str(v) for v in value]
    return parsed


def check_csr_key(role: Role, csr: dict[str, Any]) -> None:
    kt, bits = csr["key_type"], csr["key_bits"]
    if role.key_type == "any":
        if kt == "rsa" and bits < 2048:
            raise bad_request(
                f"RSA keys below 2048 bits are not accepted: the CSR's key has {bits}"
            )
        return
    if kt != role.key_type:
        raise bad_request(f"role requires keys of type {role.key_type}, but the CSR has a {kt} key")
    if kt in ("rsa", "ec") and bits < role.key_bits:
        raise bad_request(
            f"role requires {kt} keys of at least {role.key_bits} bits, but the "
            f"CSR's key has {bits}"
        )


async def leaf_spec(
    b: PKIBackend,
    req: Request,
    view: RoleView,
    f: IssueFields,
    issuer: IssuerEntry,
    csr: dict[str, Any] | None,
) -> dict[str, Any]:
    """The CertSpec fields of this leaf alone (the role's and issuer's are `shared_args`); 400 if
    any name or the lifetime is not allowed."""
    role = view.role
    cn = csr["subject"]["common_name"] if (csr is not None and role.use_csr_common_name) else ""
    cn = cn or f.common_name.strip()
    if not cn and role.require_cn:
        raise bad_request(
            "the common_name field is required, or must be provided in a CSR "
            'with "use_csr_common_name" set to true, unless "require_cn" is set '
            "to false"
        )
    if csr is not None and role.use_csr_sans:
        dns, emails = list(csr["sans"]["dns"]), list(csr["sans"]["email"])
        ips, uris = list(csr["sans"]["ip"]), list(csr["sans"]["uri"])
    else:
        dns, emails = names.split_names(f.alt_names)
        ips, uris = list(f.ip_sans), list(f.uri_sans)
    if cn and not f.exclude_cn_from_sans:
        if "@" in cn:
            emails.insert(0, cn)
        else:
            ascii_cn = names.to_ascii(cn)
            if ascii_cn is not None and names.valid_hostname(ascii_cn):
                dns.insert(0, ascii_cn)
    dns, emails = names.dedup(dns), names.dedup(emails)
    names.check_names(role, cn, dns, emails)
    ips = names.check_ips(role, ips)
    uris = names.check_uris(role, uris)
    other = names.check_other_sans(role, other_sans_of(req, f.other_sans))
    if f.serial_number:
        names.check_globs(role.allowed_serial_numbers, [f.serial_number], "serial_number")
    if f.user_ids:
        names.check_globs(role.allowed_user_ids, list(f.user_ids), "user_id")

    mount_default, mount_max = b.mount_ttls()
    max_ttl = min(role.max_ttl or mount_max, mount_max)
    not_before, not_after = validity(
        now=int(time.time()),
        ttl=f.ttl,
        not_after=f.not_after or ("" if f.ttl else role.not_after),
        default_ttl=role.ttl or mount_default,
        max_ttl=max_ttl,
        not_before_duration=role.not_before_duration,
        limit_name="role's max_ttl",
        warnings=req.scratch.setdefault("warnings", []),
    )
    not_after = limit_to_issuer(not_after, issuer)
    subject = {
        **view.subject,
        "common_name": cn,
        "serial_number": f.serial_number,
        "user_ids": list(f.user_ids),
    }
    sans = {"dns": dns, "email": emails, "ip": ips, "uri": uris, "other": other}
    return {
        "subject": issue_plan.set_only(subject),
        "sans": issue_plan.set_only(sans),
        "not_before": not_before,
        "not_after": not_after,
    }


def paths(b: PKIBackend) -> list[Path]:
    async def issue(req: Request, f: IssueFields) -> Response:
        view = await issue_plan.role_view(b, f.name)
        role = view.role
        fmt, key_fmt = check_format(f.format), check_key_format(f.private_key_format)
        if role.key_type == "any":
            if not f.key_type:
                raise bad_request(
                    'role key type "any" is only for signing CSRs: give key_type '
                    "(and key_bits) to issue with it"
                )
            key_type, key_bits = key_spec(f.key_type, f.key_bits)
        else:
            key_type, key_bits = role.key_type, role.key_bits
        signing = await issue_plan.issuer_view(b, f.issuer_ref or role.issuer_ref)
        issuer = signing.issuer
        spec = await leaf_spec(b, req, view, f, issuer, None)
        result = await b.crypto(
            "x509_issue",
            {
                "key_type": key_type,
                "key_bits": key_bits,
                "cert": spec,
                "key_forms": certs.key_forms(fmt, key_fmt),
            },
            slow=key_bits >= 4096,
            shared=await issue_plan.shared_args(b, f.name, view, signing),
        )
        if not role.no_store:
            await certs.store(b, result, issuer.id)
        data = certs.cert_data(
            result, issuer, fmt, key_format=key_fmt, without_roots=f.remove_roots_from_chain
        )
        data["not_before"] = result["not_before"]  # as OpenBao's leaf responses
        return certs.respond(b, role, result, data, req.scratch.get("warnings", []))

    async def sign(req: Request, f: IssueFields) -> Response:
        view = await issue_plan.role_view(b, f.name)
        role = view.role
        fmt = check_format(f.format)
        if not f.csr.strip():
            raise bad_request("missing required field 'csr'")
        signing = await issue_plan.issuer_view(b, f.issuer_ref or role.issuer_ref)
        issuer = signing.issuer
        csr = await b.crypto("csr_parse", {"csr": f.csr})
        check_csr_key(role, csr)
        spec = await leaf_spec(b, req, view, f, issuer, csr)
        result = await b.crypto(
            "x509_sign",
            {"csr": f.csr, "cert": spec},
            shared=await issue_plan.shared_args(b, f.name, view, signing),
        )
        if not role.no_store:
            await certs.store(b, result, issuer.id)
        data = certs.cert_data(result, issuer, fmt, without_roots=f.remove_roots_from_chain)
        data["not_before"] = result["not_before"]
        return certs.respond(b, role, result, data, req.scratch.get("warnings", []))

    return [
        Path(
            ("issue/{name}", "issuer/{issuer_ref}/issue/{name}"),
            write(issue, "Issue a certificate and a new private key"),
            IssueFields,
            synopsis="Issue a certificate with a new key, as the role allows.",
        ),
        Path(
            ("sign/{name}", "issuer/{issuer_ref}/sign/{name}"),
            write(sign, "Sign a CSR"),
            IssueFields,
            synopsis="Sign a CSR, as the role allows.",
        ),
    ]
