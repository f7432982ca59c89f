"""Revocation (`revoke`, by serial number or by certificate) and the certificate store listings
(`certs`, `certs/revoked`). A revocation is recorded, then the issuer's CRL is re-signed."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import msgspec

from services.secrets.engines.pki import certs
from services.secrets.engines.pki.models import IssuerEntry, RevokedCert
from services.secrets.engines.pki.pem import normalize_serial, rfc3339, serial_key
from services.secrets.errors import bad_request, not_found
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import Request, Response

if TYPE_CHECKING:
    from services.secrets.engines.pki.backend import PKIBackend


class RevokeFields(msgspec.Struct, kw_only=True):
    serial_number: str = ""
    certificate: str = ""


def revoked_data(rec: RevokedCert) -> dict[str, object]:
    return {
        "revocation_time": int(rec.revocation_time),
        "revocation_time_rfc3339": rfc3339(rec.revocation_time),
        "state": "revoked",
    }


async def get_revoked(b: PKIBackend, serial: str) -> RevokedCert | None:
    return await b.storage.get_obj(f"revoked/{serial_key(serial)}", RevokedCert)


async def revoke_serial(
    b: PKIBackend, serial: str, *, quiet: bool = False, certificate: str = ""
) -> Response:
    """Revoke one certificate of this mount and re-sign its issuer's CRL. `certificate` lets a
    certificate that was never stored (no_store) be revoked too."""
    serial = normalize_serial(serial)
    issuers = await b.issuers.all()
    for issuer in issuers:
        if issuer.serial_number == serial:
            raise bad_request(
                f"adding issuer (id: {issuer.id}) to its own CRL is not allowed: "
                f"revoke issuers at issuer/{issuer.id}/revoke"
            )
    existing = await get_revoked(b, serial)
    if existing is not None:
        return Response(data=revoked_data(existing))
    stored = await certs.get(b, serial)
    issuer_id, not_after = "", 0
    if stored is not None:
        certificate, issuer_id, not_after = stored.certificate, stored.issuer_id, stored.not_after
    elif certificate:
        info = await b.crypto(
            "cert_info",
            {"certificate": certificate, "candidates": [i.certificate for i in issuers]},
        )
        if not info["signed_by"]:
            raise bad_request("the certificate was not issued by any issuer of this mount")
        issuer_id, not_after = issuers[info["signed_by"][0]].id, info["not_after"]
    else:
        if quiet:
            return Response()
        raise bad_request(f"certificate with serial {serial} not found")
    expired = bool(not_after) and not_after < time.time()
    if expired and not (await b.crls.config()).allow_expired_cert_revocation:
        return Response(
            warnings=[f"certificate with serial {serial} already expired; refusing to add to CRL"]
        )
    issuer: IssuerEntry | None = next((i for i in issuers if i.id == issuer_id), None)
    if issuer is None:
        default = (await b.issuers.config()).default
        issuer = next((i for i in issuers if i.id == default), None)
    rec = RevokedCert(
        serial_number=serial,
        revocation_time=time.time(),
        issuer_id=issuer.id if issuer else issuer_id,
        not_after=not_after,
        certificate=certificate,
    )
    await b.storage.put_obj(f"revoked/{serial_key(serial)}", rec)
    if issuer is not None:
        await b.crls.add(issuer, serial, int(rec.revocation_time), not_after)
    return Response(data=revoked_data(rec))


def paths(b: PKIBackend) -> list[Path]:
    async def revoke(req: Request, f: RevokeFields) -> Response:
        if f.serial_number and f.certificate:
            raise bad_request("give either serial_number or certificate, not both")
        if f.certificate:
            info = await b.crypto("cert_info", {"certificate": f.certificate})
            return await revoke_serial(b, info["serial_number"], certificate=f.certificate)
        if not f.serial_number:
            raise bad_request("the serial_number (or certificate) field is required")
        return await revoke_serial(b, f.serial_number)

    async def list_certs(req: Request, f: NoFields) -> Response:
        keys = await b.storage.list("certs/")
        if not keys:
            raise not_found()
        return Response(data={"keys": [k.replace("-", ":") for k in keys]})

    async def list_revoked(req: Request, f: NoFields) -> Response:
        keys = await b.storage.list("revoked/")
        if not keys:
            raise not_found()
        return Response(data={"keys": [k.replace("-", ":") for k in keys]})

    return [
        Path(
            "revoke",
            write(revoke, "Revoke a certificate"),
            RevokeFields,
            synopsis="Revoke a certificate by serial number or PEM; the CRL is re-signed.",
        ),
        Path(
            ("certs/revoked", "certs/revoked/"),
            {Op.LIST: Operation(list_revoked, "List revoked serials")},
            synopsis="Serial numbers of revoked certificates.",
        ),
        Path(
            ("certs", "certs/"),
            {Op.LIST: Operation(list_certs, "List stored certificates")},
            synopsis="Serial numbers of the certificates this mount stored.",
        ),
    ]
