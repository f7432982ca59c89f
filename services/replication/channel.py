"""The cluster channel's transport: TLS 1.3 with a self-signed certificate per primary, pinned
by its SHA-256 fingerprint (carried in the activation token), so no CA is involved and no other
server can stand in for the primary. The secondary then proves itself inside the channel with the
secret from its activation token (see primary.py)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import hashlib
import hmac
import os
import ssl
import tempfile
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def new_identity(name: str) -> tuple[str, str]:
    """A fresh P-256 key and a self-signed certificate for it: (cert PEM, key PEM)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name[:64])])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode(), key_pem.decode()


def fingerprint(cert_pem_or_der: str | bytes) -> str:
    der = (
        cert_pem_or_der
        if isinstance(cert_pem_or_der, bytes)
        else x509.load_pem_x509_certificate(cert_pem_or_der.encode()).public_bytes(
            serialization.Encoding.DER
        )
    )
    return hashlib.sha256(der).hexdigest()


def server_context(cert_pem: str, key_pem: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    # The ssl module loads keys from files only: write them to a private file, then remove it.
    fd, path = tempfile.mkstemp(prefix="trellis-dr-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(cert_pem + key_pem)
        ctx.load_cert_chain(path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
    return ctx


def client_context() -> ssl.SSLContext:
    # No CA: the peer is checked by pinned fingerprint after the handshake (open_channel).
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def host_port(addr: str) -> tuple[str, int]:
    """`https://h:p`, `h:p` or `[::1]:p` -> (host, port)."""
    parts = urlsplit(addr if "//" in addr else f"//{addr}")
    if not parts.hostname or parts.port is None:
        raise ValueError(f"cluster address {addr!r} needs a host and a port")
    return parts.hostname, parts.port


class PinMismatch(Exception):
    """The server's certificate is not the one the activation token named."""


async def open_channel(
    addr: str, pinned: str, *, wait: float = 5.0
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
    """Connect to a primary's cluster address; returns (reader, writer, peer cert DER)."""
    host, port = host_port(addr)
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(host, port, ssl=client_context(), limit=2**20), wait
    )
    sslobj = writer.get_extra_info("ssl_object")
    der = sslobj.getpeercert(binary_form=True) if sslobj is not None else None
    if not der or not hmac.compare_digest(hashlib.sha256(der).hexdigest(), pinned):
        writer.close()
        raise PinMismatch("the primary's cluster certificate does not match the activation token")
    return reader, writer, der
