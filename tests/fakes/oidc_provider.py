"""A small OpenID Connect provider on loopback HTTPS for the jwt/oidc auth method tests.

It serves discovery, a JWKS of a key the test holds, an authorization step the test drives
directly (`approve` stands in for a user consenting in a browser) and the token endpoint of
the authorization code flow with client_secret_basic and PKCE S256. Its certificate is
self-signed for 127.0.0.1; `ca_pem` is what the auth method must be configured to trust.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import secrets
import ssl
import tempfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID


def self_signed(common_name: str = "oidc-test-provider") -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) of a self-signed server certificate for localhost and
    127.0.0.1."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=2))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(IPv4Address("127.0.0.1"))]
            ),
            False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


@dataclass
class Grant:
    client_id: str
    redirect_uri: str
    nonce: str
    challenge: str
    subject: str
    claims: dict[str, Any]


@dataclass
class Provider:
    url: str
    ca_pem: str
    client_id: str
    client_secret: str
    signing_key: rsa.RSAPrivateKey
    kid: str
    grants: dict[str, Grant] = field(default_factory=dict)
    token_requests: list[dict[str, str]] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    def jwks(self) -> dict[str, Any]:
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.signing_key.public_key()))
        return {"keys": [{**jwk, "kid": self.kid, "alg": "RS256", "use": "sig"}]}

    def sign(self, claims: dict[str, Any], key: Any = None, kid: str | None = None) -> str:
        """A JWT as this provider issues them (or signed by `key`, for forgeries)."""
        return jwt.encode(
            claims, key or self.signing_key, "RS256", headers={"kid": kid or self.kid}
        )

    def id_token(self, audience: str, subject: str, **extra: Any) -> str:
        now = int(time.time())
        return self.sign(
            {
                "iss": self.url,
                "aud": audience,
                "sub": subject,
                "iat": now,
                "exp": now + 300,
                **extra,
            }
        )

    def approve(self, auth_url: str, subject: str, **claims: Any) -> str:
        """The URL the browser is sent back to after the user consents to `auth_url`."""
        q = {k: v[0] for k, v in parse_qs(urlsplit(auth_url).query).items()}
        assert q["client_id"] == self.client_id and q["response_type"] == "code"
        assert q["code_challenge_method"] == "S256" and "openid" in q["scope"].split()
        code = secrets.token_hex(16)
        self.grants[code] = Grant(
            q["client_id"], q["redirect_uri"], q["nonce"], q["code_challenge"], subject, claims
        )
        return f"{q['redirect_uri']}?{urlencode({'code': code, 'state': q['state']})}"

    def exchange(self, form: dict[str, str], authorization: str) -> tuple[int, dict[str, Any]]:
        self.token_requests.append(form)
        expected = base64.b64encode(f"{self.client_id}:{self.client_secret}".encode()).decode()
        if authorization != f"Basic {expected}":
            return 401, {"error": "invalid_client"}
        grant = self.grants.pop(form.get("code", ""), None)
        if grant is None or form.get("grant_type") != "authorization_code":
            return 400, {"error": "invalid_grant"}
        digest = hashlib.sha256(form.get("code_verifier", "").encode()).digest()
        challenge = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
        if challenge != grant.challenge or form.get("redirect_uri") != grant.redirect_uri:
            return 400, {"error": "invalid_grant"}
        token = self.id_token(grant.client_id, grant.subject, nonce=grant.nonce, **grant.claims)
        return 200, {
            "access_token": secrets.token_hex(8),
            "token_type": "Bearer",
            "id_token": token,
        }

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def start_provider() -> Provider:
    cert_pem, key_pem = self_signed()
    provider = Provider(
        url="",
        ca_pem=cert_pem.decode(),
        client_id="client-" + secrets.token_hex(4),
        client_secret=secrets.token_hex(16),
        signing_key=rsa.generate_private_key(public_exponent=65537, key_size=2048),
        kid=secrets.token_hex(4),
    )

    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, body: dict[str, Any]) -> None:
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self) -> None:
            if self.path == "/.well-known/openid-configuration":
                self._send(
                    200,
                    {
                        "issuer": provider.url,
                        "authorization_endpoint": provider.url + "/authorize",
                        "token_endpoint": provider.url + "/token",
                        "jwks_uri": provider.url + "/keys",
                    },
                )
            elif self.path == "/keys":
                self._send(200, provider.jwks())
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
            if self.path != "/token":
                self._send(404, {"error": "not found"})
                return
            self._send(*provider.exchange(form, self.headers.get("Authorization", "")))

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "c.pem").write_bytes(cert_pem)
        (Path(tmp) / "k.pem").write_bytes(key_pem)
        context.load_cert_chain(Path(tmp) / "c.pem", Path(tmp) / "k.pem")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    provider.server = server
    provider.url = f"https://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return provider
