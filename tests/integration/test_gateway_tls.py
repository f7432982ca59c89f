"""TLS per listener (`trellis server` config): a listener with a certificate and key serves
HTTPS that verifies against its CA, the others stay plain HTTP; half or broken TLS settings
are refused with a message naming the listener, never the key."""

from __future__ import annotations

import ssl
import uuid
from pathlib import Path

import aiohttp
import pytest

from services.gateway.main import Gateway
from services.gateway.tls import TlsConfigError, server_context
from shared.bus import Bus
from shared.settings import ListenerTls, Settings
from tests.fakes.oidc_provider import self_signed as fake_provider_cert

pytestmark = pytest.mark.nats


def self_signed(tmp: Path) -> tuple[Path, Path]:
    cert_pem, key_pem = fake_provider_cert("localhost")
    cert_file, key_file = tmp / "cert.pem", tmp / "key.pem"
    cert_file.write_bytes(cert_pem)
    key_file.write_bytes(key_pem)
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
