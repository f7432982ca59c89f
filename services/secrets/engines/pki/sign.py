"""Privileged signing: `root/sign-intermediate` and `issuer/{ref}/sign-intermediate` (a CA
certificate for a CSR), `root/sign-self-issued` (sudo) and `issuer/{ref}/sign-self-issued`
(re-sign a self-issued CA certificate), and `sign-verbatim[/{name}]` (a leaf with the CSR's own
values; never a CA)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import msgspec

from services.secrets.engines.pki import certs, urls
from services.secrets.engines.pki.ca import ConstraintFields, constraints, subject_and_sans
from services.secrets.engines.pki.pem import check_format
from services.secrets.engines.pki.roles import DEFAULT_KEY_USAGE
from services.secrets.engines.pki.ttl import limit_to_issuer, validity
from services.secrets.errors import bad_request
from services.secrets.framework.fields import CommaList, Duration, desc
from services.secrets.framework.path import Path, write
from services.secrets.framework.request import Request, Response

if TYPE_CHECKING:
    from services.secrets.engines.pki.backend import PKIBackend


class IntermediateSignFields(ConstraintFields, kw_only=True):
    issuer_ref: str = "default"
    csr: str = ""
    use_csr_values: bool = False
    skid: str = ""
    key_usage: CommaList = []
    ext_key_usage: CommaList = []
    ext_key_usage_oids: CommaList = []


class SelfIssuedFields(msgspec.Struct, kw_only=True):
    issuer_ref: str = "default"
    certificate: str = ""
    require_matching_algorithms: bool = msgspec.field(
        default=False, name="require_matching_certificate_algorithms"
    )


class VerbatimFields(msgspec.Struct, kw_only=True):
    issuer_ref: str = "default"
    name: Annotated[str, desc("a role whose ttl, max_ttl, no_store... apply")] = ""
    csr: str = ""
    key_usage: CommaList = msgspec.field(default_factory=lambda: list(DEFAULT_KEY_USAGE))
    ext_key_usage: CommaList = []
    ext_key_usage_oids: CommaList = []
    ttl: Duration = 0
    format: str = "pem"
    not_after: str = ""
    signature_bits: int = 0
    use_pss: bool = False
    basic_constraints_valid_for_non_ca: bool | None = None


def paths(b: PKIBackend) -> list[Path]:
    async def sign_intermediate(req: Request, f: IntermediateSignFields) -> Response:
        fmt = check_format(f.format)
        if not f.csr.strip():
            raise bad_request("missing required field 'csr'")
        issuer = await b.issuers.resolve(f.issuer_ref)
        signer = await b.issuers.signer(issuer)
        csr = await b.crypto("csr_parse", {"csr": f.csr})
        if not f.common_name.strip():
            # Without a common name the CSR's is used (Vault's behaviour).
            f = msgspec.structs.replace(f, common_name=csr["subject"]["common_name"])
        if f.use_csr_values:
            subject = {"common_name": csr["subject"]["common_name"]}
            sans: dict[str, list[str]] = {}
        else:
            subject, sans = subject_and_sans(req, f)
        # A CA under a length-limited CA gets one less; a zero limit allows no CA below.
        path_len = f.max_path_length
        if issuer.max_path_length == 0:
            raise bad_request(
                "the signing issuer has a max path length of zero and cannot sign CA certificates"
            )
        if issuer.max_path_length > 0:
            limit = issuer.max_path_length - 1
            path_len = limit if path_len < 0 else min(path_len, limit)
        _, mount_max = b.mount_ttls()
        not_before, not_after = validity(
            now=int(time.time()),
            ttl=f.ttl,
            not_after=f.not_after,
            default_ttl=mount_max,
            max_ttl=mount_max,
            not_before_duration=f.not_before_duration,
            limit_name="mount's max lease TTL (tune the mount to allow longer)",
            warnings=req.scratch.setdefault("warnings", []),
        )
        spec = {
            "subject": subject,
            "sans": sans,
            "not_before": not_before,
            "not_after": not_after,
            "is_ca": True,
            "max_path_length": path_len,
            **constraints(f),
            "skid": f.skid,
            "key_usage": list(f.key_usage),
            "ext_key_usage": list(f.ext_key_usage),
            "ext_key_usage_oids": list(f.ext_key_usage_oids),
            "signature_bits": f.signature_bits,
            "use_pss": f.use_pss,
            "use_csr_subject": f.use_csr_values,
            "copy_csr_extensions": f.use_csr_values,
            **await urls.aia_for(b, issuer),
        }
        result = await b.crypto("x509_sign", {"csr": f.csr, "cert": spec, "signer": signer})
        await certs.store(b, result, issuer.id)
        return Response(
            data=certs.cert_data(result, issuer, fmt), warnings=req.scratch.get("warnings", [])
        )

    async def sign_self_issued(req: Request, f: SelfIssuedFields) -> Response:
        if not f.certificate.strip():
            raise bad_request("missing required field 'certificate'")
        issuer = await b.issuers.resolve(f.issuer_ref)
        signer = await b.issuers.signer(issuer)
        result = await b.crypto(
            "cert_resign",
            {
                "certificate": f.certificate,
                "signer": signer,
                "require_matching_certificate_algorithms": f.require_matching_algorithms,
                **await urls.aia_for(b, issuer),
            },
        )
        return Response(
            data={
                "certificate": result["certificate"].strip(),
                "issuing_ca": issuer.certificate.strip(),
            }
        )

    async def sign_verbatim(req: Request, f: VerbatimFields) -> Response:
        fmt = check_format(f.format)
        if not f.csr.strip():
            raise bad_request("missing required field 'csr'")
        role = await b.require_role(f.name) if f.name else None
        issuer = await b.issuers.resolve(f.issuer_ref)
        signer = await b.issuers.signer(issuer)
        csr = await b.crypto("csr_parse", {"csr": f.csr})
        if csr["is_ca"]:
            raise bad_request(
                "the CSR asks for a CA certificate: sign-verbatim will not issue "
                "one (use sign-intermediate)"
            )
        mount_default, mount_max = b.mount_ttls()
        max_ttl = min(role.max_ttl or mount_max, mount_max) if role else mount_max
        not_before, not_after = validity(
            now=int(time.time()),
            ttl=f.ttl,
            not_after=f.not_after,
            default_ttl=(role.ttl if role else 0) or mount_default,
            max_ttl=max_ttl,
            not_before_duration=role.not_before_duration if role else 30,
            limit_name="role's max_ttl" if role else "mount's max lease TTL",
            warnings=req.scratch.setdefault("warnings", []),
        )
        not_after = limit_to_issuer(not_after, issuer)
        bc_non_ca = f.basic_constraints_valid_for_non_ca
        if bc_non_ca is None:
            bc_non_ca = role.basic_constraints_valid_for_non_ca if role else False
        spec = {
            "not_before": not_before,
            "not_after": not_after,
            "key_usage": list(f.key_usage),
            "ext_key_usage": list(f.ext_key_usage),
            "ext_key_usage_oids": list(f.ext_key_usage_oids),
            "basic_constraints_valid_for_non_ca": bc_non_ca,
            "signature_bits": f.signature_bits or (role.signature_bits if role else 0),
            "use_pss": f.use_pss,
            "use_csr_subject": True,
            "copy_csr_extensions": True,
            **await urls.aia_for(b, issuer),
        }
        result = await b.crypto("x509_sign", {"csr": f.csr, "cert": spec, "signer": signer})
        if role is None or not role.no_store:
            await certs.store(b, result, issuer.id)
        data = certs.cert_data(result, issuer, fmt)
        data["not_before"] = result["not_before"]  # as OpenBao's leaf responses
        return certs.respond(b, role, result, data, req.scratch.get("warnings", []))

    return [
        Path(
            ("root/sign-intermediate", "issuer/{issuer_ref}/sign-intermediate"),
            write(sign_intermediate, "Sign an intermediate CA's CSR"),
            IntermediateSignFields,
            synopsis="Issue a CA certificate for a CSR (privileged).",
        ),
        Path(
            "root/sign-self-issued",
            write(sign_self_issued, "Re-sign a self-issued CA certificate", sudo=True),
            SelfIssuedFields,
            synopsis="Re-sign a self-issued CA certificate (requires sudo).",
        ),
        Path(
            "issuer/{issuer_ref}/sign-self-issued",
            write(sign_self_issued, "Re-sign a self-issued CA certificate"),
            SelfIssuedFields,
            synopsis="Re-sign a self-issued CA certificate with this issuer.",
        ),
        Path(
            (
                "sign-verbatim",
                "sign-verbatim/{name}",
                "issuer/{issuer_ref}/sign-verbatim",
                "issuer/{issuer_ref}/sign-verbatim/{name}",
            ),
            write(sign_verbatim, "Sign a CSR as it is"),
            VerbatimFields,
            synopsis="Sign a CSR with its own subject and extensions (never a CA).",
        ),
    ]
