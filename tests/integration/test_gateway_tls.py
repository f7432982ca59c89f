"""TLS per listener (`trellis server` config): a listener with a certificate and key serves
HTTPS that verifies against its CA, the others stay plain HTTP; half or broken TLS settings
are refused with a message naming the listener, never the key."""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
import uuid
from pathlib import Path

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from services.gateway.main import Gateway
from services.gateway.tls import TlsConfigError, server_context
from shared.bus import Bus
from shared.settings import ListenerTls, Settings

pytestmark = pytest.mark.nats


def self_signed(tmp: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp / "cert.pem", tmp / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_file.chmod(0o600)
    return cert_file, key_file


async def test_tls_on_one_listener(nats_url: str, tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    settings = Settings(
        nats_url=nats_url,
        cluster_name="tls" + uuid.uuid4().hex[:8],
        secrets_addr="127.0.0.1:0",
        workspace_addr="127.0.0.1:0",
        scheduler_addr="127.0.0.1:0",
        workspace_tls=ListenerTls(cert_file=str(cert), key_file=str(key)),
    )
    bus = await Bus.connect(nats_url, "gateway-tls")
    gw = Gateway(bus, settings)
    await gw.start()
    try:
        assert gw.addresses["workspace"].startswith("https://")
        assert gw.addresses["secrets"].startswith("http://")
        trusted = ssl.create_default_context(cafile=str(cert))
        async with aiohttp.ClientSession() as s:
            async with s.get(gw.addresses["workspace"] + "/healthz", ssl=trusted) as r:
                assert r.status == 200
            async with s.get(gw.addresses["secrets"] + "/healthz") as r:
                assert r.status == 200
            # Untrusted certificate: the client refuses it.
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                async with s.get(gw.addresses["workspace"] + "/healthz") as r:
                    pass
            # Plain HTTP to the TLS listener gets nothing useful.
            plain = gw.addresses["workspace"].replace("https://", "http://")
            with pytest.raises(aiohttp.ClientError):
                async with s.get(plain + "/healthz") as r:
                    assert r.status != 200
    finally:
        await gw.stop()
        await bus.close()


def test_bad_tls_settings_are_refused(tmp_path: Path) -> None:
    cert, _ = self_signed(tmp_path)
    assert server_context(ListenerTls(), "secrets") is None
    with pytest.raises(TlsConfigError, match="secrets_tls needs both"):
        server_context(ListenerTls(cert_file=str(cert)), "secrets")
    with pytest.raises(TlsConfigError, match="not a readable file"):
        server_context(ListenerTls(cert_file=str(cert), key_file=str(tmp_path / "no")), "x")
    _, other_key = self_signed(_sub(tmp_path))  # a key that does not match the certificate
    with pytest.raises(TlsConfigError) as exc:
        server_context(ListenerTls(cert_file=str(cert), key_file=str(other_key)), "workspace")
    assert "PRIVATE KEY" not in str(exc.value) and "workspace_tls" in str(exc.value)


def _sub(tmp: Path) -> Path:
    d = tmp / "other"
    d.mkdir()
    return d
