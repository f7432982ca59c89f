"""`trellis dev --tls`: a development CA from Trellis's own PKI engine and a server certificate
for localhost, 127.0.0.1 and ::1, used by every listener of the gateway.

The server key is generated here and written straight to a 0600 file that only the gateway
reads: only its CSR goes to the PKI engine. The CA (a root kept inside the PKI mount) and the
certificate are written beside it; clients trust `ca.pem` (SSL_CERT_FILE, VAULT_CACERT...).
Runs during the bootstrap, against the private loopback gateway, before public listeners open.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from shared.localnet import http_json, trust_ca

MOUNT = "trellis-dev-pki"
ROLE = "localhost"
HOSTS = ("localhost",)
IPS = ("127.0.0.1", "::1")
CA_TTL = "87600h"
CERT_TTL = "8760h"
LISTENERS = ("secrets", "workspace", "scheduler")


@dataclass(frozen=True)
class DevTls:
    ca_file: Path
    cert_file: Path
    key_file: Path

    def env(self) -> dict[str, str]:
        """The gateway's settings: one certificate for every listener."""
        out: dict[str, str] = {}
        for name in LISTENERS:
            out[f"TRELLIS_{name.upper()}_TLS__CERT_FILE"] = str(self.cert_file)
            out[f"TRELLIS_{name.upper()}_TLS__KEY_FILE"] = str(self.key_file)
        # Remote run tasks (a public certificate) trust the dev CA.
        out["TRELLIS_RUNNER_CA_FILE"] = str(self.ca_file)
        return out


def _write_private(path: Path, data: bytes) -> None:
    """Created 0600 before a byte is written: the key is never readable by others."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _call(base: str, token: str, method: str, path: str, body: Any = None) -> dict[str, Any]:
    code, doc = http_json(method, f"{base}/v1/{path}", body, token=token)
    if code not in (200, 204):
        errors = doc.get("errors") if isinstance(doc, dict) else doc
        hint = " (--tls needs the crypto service: keep it in --services)" if code >= 500 else ""
        raise SystemExit(f"--tls: {method} {path} failed ({code}): {errors}{hint}")
    return doc or {}


def _csr() -> tuple[bytes, str]:
    key = ec.generate_private_key(ec.SECP256R1())
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName(h) for h in HOSTS]
                + [x509.IPAddress(ipaddress.ip_address(i)) for i in IPS]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return key_pem, csr.public_bytes(serialization.Encoding.PEM).decode()


def issue(base: str, token: str, data_dir: Path) -> DevTls:
    """Mount the dev PKI (once per data dir), make its root, and sign a fresh server
    certificate; write ca.pem, server.pem and server-key.pem (all 0600) under data_dir/tls."""
    tls_dir = data_dir / "tls"
    tls_dir.mkdir(mode=0o700, exist_ok=True)
    mounts = _call(base, token, "GET", "sys/mounts")
    listed = mounts.get("data", mounts)
    if f"{MOUNT}/" not in listed:
        _call(
            base,
            token,
            "POST",
            f"sys/mounts/{MOUNT}",
            {"type": "pki", "config": {"max_lease_ttl": CA_TTL}},
        )
    code, ca = http_json("GET", f"{base}/v1/{MOUNT}/cert/ca", token=token)
    ca_pem = (ca or {}).get("data", {}).get("certificate", "") if code == 200 else ""
    if not ca_pem:
        root = _call(
            base,
            token,
            "POST",
            f"{MOUNT}/root/generate/internal",
            {"common_name": "Trellis development CA", "ttl": CA_TTL, "key_type": "ec"},
        )
        ca_pem = root["data"]["certificate"]
    _call(
        base,
        token,
        "POST",
        f"{MOUNT}/roles/{ROLE}",
        {
            "allowed_domains": "localhost",
            "key_type": "ec",
            "key_bits": 256,
            "allow_bare_domains": True,
            "allow_localhost": True,
            "allow_ip_sans": True,
            "allow_subdomains": False,
            "server_flag": True,
            "client_flag": False,
            "max_ttl": CERT_TTL,
        },
    )
    key_pem, csr_pem = _csr()
    signed = _call(
        base,
        token,
        "POST",
        f"{MOUNT}/sign/{ROLE}",
        {
            "csr": csr_pem,
            "common_name": "localhost",
            "alt_names": ",".join(HOSTS),
            "ip_sans": ",".join(IPS),
            "ttl": CERT_TTL,
        },
    )["data"]
    out = DevTls(tls_dir / "ca.pem", tls_dir / "server.pem", tls_dir / "server-key.pem")
    _write_private(out.key_file, key_pem)
    _write_private(
        out.cert_file, (signed["certificate"].strip() + "\n" + ca_pem.strip() + "\n").encode()
    )
    _write_private(out.ca_file, (ca_pem.strip() + "\n").encode())
    return out


def scheme(args: Any) -> str:
    return "https" if getattr(args, "tls", False) else "http"


def enable(env: dict[str, str], tls: DevTls) -> None:
    """From now on: services started with `env` serve HTTPS, and the supervisor's own setup
    requests verify the dev CA."""
    env.update(tls.env())
    trust_ca(str(tls.ca_file))


def client_ca_env(args: Any) -> dict[str, str]:
    """--tls-client-ca-file: the secrets listener asks clients for a certificate (cert auth).
    Only an HTTPS listener can; the bootstrap listener is plain HTTP and ignores it."""
    ca_file = getattr(args, "tls_client_ca_file", "")
    if not ca_file:
        return {}
    if not getattr(args, "tls", False):
        raise SystemExit("--tls-client-ca-file needs --tls")
    path = Path(ca_file).resolve()
    if not path.is_file():
        raise SystemExit(f"--tls-client-ca-file: {ca_file} is not a readable file")
    return {"TRELLIS_SECRETS_TLS__CLIENT_CA_FILE": str(path)}


def banner(args: Any, data_dir: Path) -> str:
    """The start-up line naming the CA clients must trust (empty without --tls)."""
    if not getattr(args, "tls", False):
        return ""
    return f"CA certificate: {data_dir / 'tls' / 'ca.pem'}\n"
