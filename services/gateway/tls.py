"""HTTPS for the gateway's listeners: one server context per listener from its PEM files.
The private key is read once into the context (the process's memory) and never logged."""

from __future__ import annotations

import ssl
from pathlib import Path

from shared.settings import ListenerTls


class TlsConfigError(ValueError):
    pass


def server_context(tls: ListenerTls, listener: str) -> ssl.SSLContext | None:
    """None when the listener is plain HTTP; a clear error when half configured or unreadable."""
    if not tls.cert_file and not tls.key_file:
        return None
    if not tls.cert_file or not tls.key_file:
        raise TlsConfigError(f"{listener}_tls needs both cert_file and key_file")
    for what, path in (("cert_file", tls.cert_file), ("key_file", tls.key_file)):
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
    return ctx
