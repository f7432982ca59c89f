"""HTTPS for the gateway's listeners: one server context per listener from its PEM files.
The private key is read once into the context (the process's memory) and never logged."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

from shared.settings import ListenerTls

# OpenSSL's X509_V_FLAG_NO_CHECK_TIME (Python's ssl names no constant for it).
_NO_CHECK_TIME = 0x200000


class TlsConfigError(ValueError):
    pass


def server_context(tls: ListenerTls, listener: str) -> ssl.SSLContext | None:
    """None when the listener is plain HTTP; a clear error when half configured or unreadable."""
    if not tls.cert_file and not tls.key_file:
        return None
    if not tls.cert_file or not tls.key_file:
        raise TlsConfigError(f"{listener}_tls needs both cert_file and key_file")
    files = [("cert_file", tls.cert_file), ("key_file", tls.key_file)]
    if tls.client_ca_file:
        files.append(("client_ca_file", tls.client_ca_file))
    for what, path in files:
        if not Path(path).is_file():
            raise TlsConfigError(f"{listener}_tls.{what}: {path} is not a readable file")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(tls.cert_file, tls.key_file)
    except (ssl.SSLError, OSError) as exc:
        # The reason only (e.g. key/certificate mismatch), never file contents.
        raise TlsConfigError(
            f"{listener}_tls: cannot load the certificate and key: {exc.__class__.__name__}"
        ) from None
    if tls.client_ca_file:
        request_client_certs(ctx, tls.client_ca_file, listener)
    return ctx


def request_client_certs(ctx: ssl.SSLContext, ca_file: str, listener: str) -> None:
    """Ask for (never require) a client certificate from these CAs, as Vault's listener does.
    The certificate is only ever an input to the cert auth method, which checks validity and
    trust against its own roles: the handshake skips the time check so an expired certificate
    is refused there, with a reason, rather than by a broken connection."""
    try:
        ctx.load_verify_locations(cafile=ca_file)
    except (ssl.SSLError, OSError) as exc:
        raise TlsConfigError(
            f"{listener}_tls.client_ca_file: cannot load the CA certificates: "
            f"{exc.__class__.__name__}"
        ) from None
    ctx.verify_mode = ssl.CERT_OPTIONAL
    ctx.verify_flags |= _NO_CHECK_TIME


def peer_certificates(transport: asyncio.BaseTransport | None) -> list[bytes]:
    """The client's certificate (DER) of a TLS connection, or nothing. Python's ssl gives only
    the leaf of the chain the client sent."""
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    if ssl_object is None:
        return []
    der = ssl_object.getpeercert(binary_form=True)
    return [der] if der else []
