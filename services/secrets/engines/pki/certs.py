"""Issued certificates: how a response carries them (`format`, `private_key_format`, chain,
lease) and how they are kept (`certs/<serial>`; never the private key)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from services.secrets.engines.pki.models import CertEntry, IssuerEntry
from services.secrets.engines.pki.pem import as_format, der_b64, serial_key
from services.secrets.framework.request import LeaseSpec, Response

if TYPE_CHECKING:
    from services.secrets.engines.pki.backend import PKIBackend
    from services.secrets.engines.pki.roles import Role

SECRET_TYPE = "pki"


async def store(b: PKIBackend, result: dict[str, Any], issuer_id: str) -> None:
    entry = CertEntry(
        serial_number=result["serial_number"],
        certificate=result["certificate"],
        issuer_id=issuer_id,
        not_after=result["not_after"],
    )
    await b.storage.put_obj(f"certs/{serial_key(entry.serial_number)}", entry)


async def get(b: PKIBackend, serial: str) -> CertEntry | None:
    return await b.storage.get_obj(f"certs/{serial_key(serial)}", CertEntry)


def chain_of(issuer: IssuerEntry, *, without_roots: bool = False) -> list[str]:
    chain = issuer.ca_chain or [issuer.certificate]
    if without_roots and len(issuer.chain_self_signed) == len(chain):
        return [c for c, root in zip(chain, issuer.chain_self_signed, strict=True) if not root]
    return chain


def key_forms(fmt: str, key_format: str) -> list[str]:
    """The PEM forms of a new key (x509_issue's `key_forms`) that `cert_data` shows."""
    forms = ["pkcs8" if key_format == "pkcs8" else "traditional"]
    if fmt == "pem_bundle" and "traditional" not in forms:
        forms.append("traditional")
    return forms


def cert_data(
    result: dict[str, Any],
    issuer: IssuerEntry | None,
    fmt: str,
    *,
    key_format: str | None = None,
    without_roots: bool = False,
) -> dict[str, Any]:
    """The certificate response: certificate, issuing_ca, ca_chain, serial_number, expiration,
    and private_key/private_key_type when the key was generated here (`key_format` set)."""
    cert = result["certificate"]
    chain = chain_of(issuer, without_roots=without_roots) if issuer is not None else []
    issuing = issuer.certificate if issuer is not None else cert
    data: dict[str, Any] = {
        "certificate": as_format(cert, fmt),
        "issuing_ca": as_format(issuing, fmt),
        "ca_chain": [as_format(c, fmt) for c in chain],
        "serial_number": result["serial_number"],
        "expiration": result["not_after"],
    }
    with_key = key_format is not None and "private_key_type" in result
    if with_key:
        key_pem = result["private_key_pkcs8"] if key_format == "pkcs8" else result["private_key"]
        data["private_key"] = der_b64(key_pem) if fmt == "der" else key_pem.strip()
        data["private_key_type"] = result["private_key_type"]
    if fmt == "pem_bundle":
        # The bundle always carries the key in its PKCS#1/SEC1 form, then the certificate and
        # the chain above it (nothing more for a self-signed root).
        parts = [result["private_key"].strip()] if with_key else []
        parts.append(cert.strip())
        parts += [c.strip() for c in chain if c.strip() != cert.strip()]
        data["certificate"] = "\n".join(parts)
    return data


def respond(
    b: PKIBackend,
    role: Role | None,
    result: dict[str, Any],
    data: dict[str, Any],
    warnings: list[str],
) -> Response:
    """A response with a lease when the role asks for one (and stores its certificates)."""
    lease = None
    if role is not None and role.generate_lease and not role.no_store:
        ttl = max(1, int(result["not_after"] - time.time()))
        lease = LeaseSpec(
            ttl=ttl,
            max_ttl=ttl,
            renewable=False,
            secret_type=SECRET_TYPE,
            internal={"serial_number": result["serial_number"]},
        )
    return Response(data=data, warnings=warnings, lease=lease)
