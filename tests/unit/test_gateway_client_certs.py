"""Client certificates on a gateway listener (services/gateway/tls.py): with `client_ca_file`
the listener asks for (never requires) a certificate, accepts an expired one (the cert auth
method judges validity), and hands the leaf's DER to the request; without it, none is asked."""

from __future__ import annotations

import datetime
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from services.gateway.tls import peer_certificates, server_context
from shared.settings import ListenerTls
from tests.openssl_ca import Issued, OpensslCa

PAST = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)


@asynccontextmanager
async def listener(tls: ListenerTls) -> AsyncIterator[str]:
    async def seen(request: web.Request) -> web.Response:
        return web.json_response([d.hex() for d in peer_certificates(request.transport)])

    app = web.Application()
    app.router.add_get("/", seen)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_context(tls, "secrets"))
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"https://127.0.0.1:{port}/"
    finally:
        await runner.cleanup()


def client_ctx(server_ca: Path, who: Issued | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(server_ca))
    if who is not None:
        ctx.load_cert_chain(str(who.cert), str(who.key))
    return ctx


async def fetch(url: str, ctx: ssl.SSLContext) -> list[str]:
    async with aiohttp.ClientSession() as s, s.get(url, ssl=ctx) as r:
        return await r.json()


@pytest.fixture
def pki(tmp_path: Path) -> Callable[[str], OpensslCa]:
    return lambda name: OpensslCa(tmp_path, name)


async def test_client_certificate_requested_and_forwarded(
    pki: Callable[[str], OpensslCa],
) -> None:
    server_ca, client_ca, stranger_ca = pki("server-ca"), pki("client-ca"), pki("stranger-ca")
    server = server_ca.issue("srv", "/CN=localhost", usage="serverAuth", sans="IP:127.0.0.1")
    good = client_ca.issue("good", "/CN=good")
    expired = client_ca.issue(
        "old", "/CN=old", not_before=PAST, not_after=PAST + datetime.timedelta(1)
    )
    stranger = stranger_ca.issue("stranger", "/CN=stranger")
    ca_file = server_ca.dir / "ca.pem"
    tls = ListenerTls(
        cert_file=str(server.cert),
        key_file=str(server.key),
        client_ca_file=str(client_ca.dir / "ca.pem"),
    )
    async with listener(tls) as url:
        sent = await fetch(url, client_ctx(ca_file, good))
        leaf = x509.load_pem_x509_certificate(good.cert.read_bytes())
        assert sent == [leaf.public_bytes(Encoding.DER).hex()]
        assert await fetch(url, client_ctx(ca_file, None)) == []  # optional
        assert len(await fetch(url, client_ctx(ca_file, expired))) == 1
        with pytest.raises(aiohttp.ClientError):  # not from the listed CAs
            await fetch(url, client_ctx(ca_file, stranger))
    # Without client_ca_file no certificate is asked for, so none is seen.
    plain = ListenerTls(cert_file=str(server.cert), key_file=str(server.key))
    async with listener(plain) as url:
        assert await fetch(url, client_ctx(ca_file, good)) == []
