"""Unauthenticated reads of authority information: the default issuer's certificate and chain
(`ca`, `ca/pem`, `ca_chain`, `cert/ca`, `cert/ca_chain`), CRLs (`crl`, `crl/pem`, `cert/crl`,
`issuer/{ref}/crl[/der|/pem]`), issuers (`issuer/{ref}/json|der|pem`) and issued certificates
(`cert/{serial}`, `cert/{serial}/raw[/pem]`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from services.secrets.engines.pki import certs
from services.secrets.engines.pki.models import IssuerEntry
from services.secrets.engines.pki.pem import der_bytes, normalize_serial, rfc3339
from services.secrets.engines.pki.revoke import get_revoked
from services.secrets.errors import not_found
from services.secrets.framework.path import NoFields, Op, Operation, Path
from services.secrets.framework.request import RawResponse, Request, Response

if TYPE_CHECKING:
    from services.secrets.engines.pki.backend import PKIBackend

PKIX_CERT = "application/pkix-cert"
PEM_CHAIN = "application/pem-certificate-chain"
PKIX_CRL = "application/pkix-crl"
PEM_FILE = "application/x-pem-file"


class IssuerRef(msgspec.Struct, kw_only=True):
    issuer_ref: str = "default"


class SerialRef(msgspec.Struct, kw_only=True):
    serial: str


def raw(body: bytes, content_type: str) -> Response:
    return Response(raw=RawResponse(status=200, body=body, content_type=content_type))


def pem_text(*pems: str) -> bytes:
    return ("\n".join(p.strip() for p in pems) + "\n").encode()


def paths(b: PKIBackend) -> list[Path]:
    store = b.issuers

    async def default_issuer() -> IssuerEntry:
        return await store.resolve("default")

    async def ca_der(req: Request, f: NoFields) -> Response:
        return raw(der_bytes((await default_issuer()).certificate), PKIX_CERT)

    async def ca_pem(req: Request, f: NoFields) -> Response:
        return raw(pem_text((await default_issuer()).certificate), PEM_CHAIN)

    async def ca_chain(req: Request, f: NoFields) -> Response:
        return raw(pem_text(*certs.chain_of(await default_issuer())), PEM_CHAIN)

    async def crl_der(req: Request, f: NoFields) -> Response:
        state = await b.crls.current(await default_issuer())
        return raw(der_bytes(state.pem), PKIX_CRL)

    async def crl_pem(req: Request, f: NoFields) -> Response:
        state = await b.crls.current(await default_issuer())
        return raw(pem_text(state.pem), PEM_FILE)

    async def issuer_json(req: Request, f: IssuerRef) -> Response:
        issuer = await store.resolve(f.issuer_ref)
        data: dict[str, Any] = {
            "certificate": issuer.certificate.strip(),
            "ca_chain": [c.strip() for c in certs.chain_of(issuer)],
            "issuer_id": issuer.id,
            "issuer_name": issuer.name,
        }
        if issuer.revoked:  # as OpenBao: the revocation fields only for a revoked issuer
            data["revocation_time"] = issuer.revocation_time
            data["revocation_time_rfc3339"] = rfc3339(issuer.revocation_time)
        return Response(data=data)

    async def issuer_der(req: Request, f: IssuerRef) -> Response:
        return raw(der_bytes((await store.resolve(f.issuer_ref)).certificate), PKIX_CERT)

    async def issuer_pem(req: Request, f: IssuerRef) -> Response:
        return raw(pem_text((await store.resolve(f.issuer_ref)).certificate), PEM_CHAIN)

    async def issuer_crl(req: Request, f: IssuerRef) -> Response:
        state = await b.crls.current(await store.resolve(f.issuer_ref))
        return Response(data={"crl": state.pem.strip()})

    async def issuer_crl_der(req: Request, f: IssuerRef) -> Response:
        state = await b.crls.current(await store.resolve(f.issuer_ref))
        return raw(der_bytes(state.pem), PKIX_CRL)

    async def issuer_crl_pem(req: Request, f: IssuerRef) -> Response:
        state = await b.crls.current(await store.resolve(f.issuer_ref))
        return raw(pem_text(state.pem), PEM_FILE)

    async def cert_pem(serial: str) -> tuple[str, dict[str, Any]]:
        """A stored certificate (or `ca`, `ca_chain`, `crl`) and its revocation fields."""
        if serial in ("ca", "ca_chain", "crl"):
            issuer = await default_issuer()
            revoked_at = rfc3339(issuer.revocation_time) if issuer.revoked else ""
            extra = {"revocation_time_rfc3339": revoked_at}
            if serial == "ca":
                return issuer.certificate.strip(), extra
            if serial == "ca_chain":
                chain = "\n".join(c.strip() for c in certs.chain_of(issuer))
                return chain, {"ca_chain": chain, **extra}
            return (await b.crls.current(issuer)).pem.strip(), extra
        serial = normalize_serial(serial)
        stored = await certs.get(b, serial)
        revoked = await get_revoked(b, serial)
        pem = stored.certificate if stored else (revoked.certificate if revoked else "")
        if not pem:
            for issuer in await store.all():
                if issuer.serial_number == serial:
                    pem = issuer.certificate
        if not pem:
            raise not_found(f"certificate with serial {serial} not found")
        extra: dict[str, Any] = {"revocation_time": 0, "revocation_time_rfc3339": ""}
        if revoked is not None:  # Vault names the issuer only for a revoked certificate
            extra["revocation_time"] = int(revoked.revocation_time)
            extra["revocation_time_rfc3339"] = rfc3339(revoked.revocation_time)
            extra["issuer_id"] = revoked.issuer_id
        return pem.strip(), extra

    async def cert_json(req: Request, f: SerialRef) -> Response:
        pem, extra = await cert_pem(f.serial)
        data = {"certificate": pem, "revocation_time": 0, **extra}
        return Response(data=data)

    async def cert_raw(req: Request, f: SerialRef) -> Response:
        pem, _ = await cert_pem(f.serial)
        kind = PKIX_CRL if f.serial == "crl" else PKIX_CERT
        return raw(der_bytes(pem), kind)

    async def cert_raw_pem(req: Request, f: SerialRef) -> Response:
        pem, _ = await cert_pem(f.serial)
        return raw(pem_text(pem), PEM_FILE if f.serial == "crl" else PEM_CHAIN)

    def get(handler: Any, summary: str) -> dict[Op, Operation]:
        return {Op.READ: Operation(handler, summary, unauthenticated=True)}

    return [
        Path(
            "ca",
            get(ca_der, "The default issuer's certificate (DER)"),
            synopsis="The default issuer's certificate, DER.",
        ),
        Path(
            "ca/pem",
            get(ca_pem, "The default issuer's certificate (PEM)"),
            synopsis="The default issuer's certificate, PEM.",
        ),
        Path(
            "ca_chain",
            get(ca_chain, "The default issuer's chain (PEM)"),
            synopsis="The default issuer's CA chain, PEM.",
        ),
        Path(
            "crl",
            get(crl_der, "The default issuer's CRL (DER)"),
            synopsis="The default issuer's CRL, DER.",
        ),
        Path(
            "crl/pem",
            get(crl_pem, "The default issuer's CRL (PEM)"),
            synopsis="The default issuer's CRL, PEM.",
        ),
        Path(
            "issuer/{issuer_ref}/json",
            get(issuer_json, "An issuer's certificate and chain"),
            IssuerRef,
            synopsis="An issuer's certificate and chain, JSON.",
        ),
        Path(
            "issuer/{issuer_ref}/der",
            get(issuer_der, "An issuer's certificate (DER)"),
            IssuerRef,
            synopsis="An issuer's certificate, DER.",
        ),
        Path(
            "issuer/{issuer_ref}/pem",
            get(issuer_pem, "An issuer's certificate (PEM)"),
            IssuerRef,
            synopsis="An issuer's certificate, PEM.",
        ),
        Path(
            "issuer/{issuer_ref}/crl",
            get(issuer_crl, "An issuer's CRL (JSON)"),
            IssuerRef,
            synopsis="An issuer's CRL, JSON.",
        ),
        Path(
            "issuer/{issuer_ref}/crl/der",
            get(issuer_crl_der, "An issuer's CRL (DER)"),
            IssuerRef,
            synopsis="An issuer's CRL, DER.",
        ),
        Path(
            "issuer/{issuer_ref}/crl/pem",
            get(issuer_crl_pem, "An issuer's CRL (PEM)"),
            IssuerRef,
            synopsis="An issuer's CRL, PEM.",
        ),
        Path(
            "cert/{serial}/raw/pem",
            get(cert_raw_pem, "A certificate (PEM)"),
            SerialRef,
            synopsis="A certificate by serial number, PEM.",
        ),
        Path(
            "cert/{serial}/raw",
            get(cert_raw, "A certificate (DER)"),
            SerialRef,
            synopsis="A certificate by serial number, DER.",
        ),
        Path(
            "cert/{serial}",
            get(cert_json, "A certificate (JSON)"),
            SerialRef,
            synopsis="A certificate by serial number (or ca, ca_chain, crl), JSON.",
        ),
    ]
