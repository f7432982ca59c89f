"""The kubernetes auth method with unmodified hvac through `trellis dev`: config and role CRUD
and validation as OpenBao answers them, and logins reviewed by a small TokenReview server in
this test (aiohttp over HTTPS with a certificate from the openssl CLI) that answers as the
Kubernetes API does."""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import ssl
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hvac
import hvac.exceptions
import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

from tests.conftest import free_port
from tests.procs import DevProcess

pytestmark = pytest.mark.e2e

REVIEW_PATH = "/apis/authentication.k8s.io/v1/tokenreviews"
ISSUER = "kubernetes/serviceaccount"


@dataclass
class Account:
    name: str
    namespace: str
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))


@dataclass
class ReviewServer:
    """Answers TokenReviews: `known` maps a token to the account and audiences the API
    server would report; `unauthenticated` tokens review as not authenticated."""

    url: str
    ca_file: Path
    reviewer: str
    known: dict[str, tuple[Account, list[str]]] = field(default_factory=dict)
    unauthenticated: set[str] = field(default_factory=set)
    seen: list[dict[str, Any]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        bearer = request.headers.get("Authorization", "")
        token = body["spec"]["token"]
        self.seen.append({"bearer": bearer, "body": body})
        allowed_bearers = {f"Bearer {self.reviewer}", f"Bearer {token}"}
        if bearer not in allowed_bearers or body.get("kind") != "TokenReview":
            return web.json_response(
                {"kind": "Status", "status": "Failure", "reason": "Unauthorized", "code": 401},
                status=401,
            )
        status: dict[str, Any] = {"authenticated": False}
        if token in self.known and token not in self.unauthenticated:
            acct, auds = self.known[token]
            wanted = body["spec"].get("audiences") or auds
            if set(wanted) & set(auds):
                status = {
                    "authenticated": True,
                    "audiences": [a for a in wanted if a in auds],
                    "user": {
                        "username": f"system:serviceaccount:{acct.namespace}:{acct.name}",
                        "uid": acct.uid,
                        "groups": ["system:serviceaccounts"],
                    },
                }
            else:
                status = {"authenticated": False, "error": "token audiences are invalid"}
        return web.json_response(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "status": status},
            status=201,
        )


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def server_tls(tmp: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 from the openssl CLI: (cert, key)."""
    openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", "k8s.key", "-out", "k8s.pem", "-days", "2", "-subj", "/CN=k8s-api-test",
        "-addext", "subjectAltName=IP:127.0.0.1",
        cwd=tmp,
    )  # fmt: skip
    return tmp / "k8s.pem", tmp / "k8s.key"


@pytest.fixture(scope="module")
def review_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReviewServer]:
    tmp = tmp_path_factory.mktemp("k8s-api")
    cert, key = server_tls(tmp)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    port = free_port()
    server = ReviewServer(f"https://127.0.0.1:{port}", cert, reviewer=f"reviewer-{uuid.uuid4()}")
    loop = asyncio.new_event_loop()
    started = threading.Event()
    runner_box: list[web.AppRunner] = []

    async def start() -> None:
        app = web.Application()
        app.router.add_post(REVIEW_PATH, server.handle)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port, ssl_context=ctx).start()
        runner_box.append(runner)
        started.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(start()), loop.run_forever()))
    thread.start()
    assert started.wait(30), "the TokenReview server did not start"
    try:
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(runner_box[0].cleanup(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()


@pytest.fixture(scope="module")
def d(trellis_dev: DevProcess) -> DevProcess:
    """The session's `trellis dev` (tests/conftest.py): every test mounts its own auth path."""
    return trellis_dev


@pytest.fixture
def client(d: DevProcess) -> hvac.Client:
    return hvac.Client(url=d.secrets, token=d.root_token)


def mount(client: hvac.Client) -> str:
    path = f"k8s-{uuid.uuid4().hex[:8]}"
    client.sys.enable_auth_method("kubernetes", path=path)
    return path


SIGNER = ec.generate_private_key(ec.SECP256R1())


def make_jwt(acct: Account, aud: list[str], *, exp_in: int = 600, key: Any = SIGNER) -> str:
    """A projected service-account token, ES256-signed."""
    now = int(time.time())
    claims = {
        "iss": ISSUER,
        "aud": aud,
        "exp": now + exp_in,
        "iat": now,
        "sub": f"system:serviceaccount:{acct.namespace}:{acct.name}",
        "kubernetes.io": {
            "namespace": acct.namespace,
            "serviceaccount": {"name": acct.name, "uid": acct.uid},
        },
    }

    def b64(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    head = b64(json.dumps({"alg": "ES256", "typ": "JWT"}).encode())
    body = b64(json.dumps(claims).encode())
    der = key.sign(f"{head}.{body}".encode(), ec.ECDSA(hashes.SHA256()))
    r, s = decode_dss_signature(der)
    return f"{head}.{body}.{b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


def public_pem(key: Any = SIGNER) -> str:
    """The signing key's public half as a self-signed certificate (what hvac sends)."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sa-signer")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode()


SIGNER_PEM = public_pem()


def test_config_and_role_crud(client: hvac.Client) -> None:
    path = mount(client)
    k8s = client.auth.kubernetes
    # No config, no roles yet: both reads are 404s, as OpenBao.
    with pytest.raises(hvac.exceptions.InvalidPath):
        k8s.read_config(mount_point=path)
    with pytest.raises(hvac.exceptions.InvalidPath):
        k8s.list_roles(mount_point=path)
    with pytest.raises(hvac.exceptions.InvalidRequest) as missing:
        k8s.configure(
            kubernetes_host="https://127.0.0.1:1", disable_local_ca_jwt=True, mount_point=path
        )
    assert "kubernetes_ca_cert must be given" in str(missing.value)
    with pytest.raises(hvac.exceptions.InvalidRequest) as not_pem:
        client.write(f"auth/{path}/config", kubernetes_host="h", kubernetes_ca_cert="ca_cert")
    assert "PEM" in str(not_pem.value)
    with pytest.raises(hvac.exceptions.InvalidRequest):
        client.write(
            f"auth/{path}/config",
            kubernetes_host="h",
            pem_keys=["-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----"],
        )
    reviewer = f"secret-reviewer-{uuid.uuid4()}"
    k8s.configure(
        kubernetes_host="https://192.0.2.1:8443",
        kubernetes_ca_cert="-----BEGIN CERTIFICATE-----\\n.....\\n-----END CERTIFICATE-----",
        token_reviewer_jwt=reviewer,
        pem_keys=[SIGNER_PEM],
        issuer="bob",
        mount_point=path,
    )
    config = k8s.read_config(mount_point=path)
    assert config["kubernetes_host"] == "https://192.0.2.1:8443"
    assert config["pem_keys"] == [SIGNER_PEM.strip()]  # trimmed, as Vault's comma lists
    assert config["issuer"] == "bob" and config["disable_iss_validation"] is True
    assert config["token_reviewer_jwt_set"] is True
    assert "token_reviewer_jwt" not in config and reviewer not in json.dumps(config)
    # Roles: both bounds may be `*`; `*` mixed with names is refused; names are required.
    k8s.create_role("any", ["*"], ["*"], mount_point=path)
    with pytest.raises(hvac.exceptions.InvalidRequest) as mixed:
        k8s.create_role("mixed", ["*", "a"], ["default"], mount_point=path)
    assert 'can not mix "*" with values' in str(mixed.value)
    with pytest.raises(hvac.exceptions.InvalidRequest):
        client.write(f"auth/{path}/role/nobody", bound_service_account_namespaces="default")
    with pytest.raises(hvac.exceptions.InvalidRequest):
        k8s.create_role("bad-alias", ["a"], ["b"], alias_name_source="pod", mount_point=path)
    k8s.create_role(
        "app",
        ["vault-auth"],
        ["default"],
        audience="vault",
        alias_name_source="serviceaccount_name",
        token_type="service",
        policies=["app-read"],
        ttl="1h",
        mount_point=path,
    )
    role = k8s.read_role("app", mount_point=path)
    assert role["bound_service_account_names"] == ["vault-auth"]
    assert role["bound_service_account_namespaces"] == ["default"]
    assert role["audience"] == "vault"
    assert role["alias_name_source"] == "serviceaccount_name"
    assert role["token_policies"] == ["app-read"] and role["policies"] == ["app-read"]
    assert role["token_ttl"] == 3600 and role["token_type"] == "service"
    assert k8s.read_role("any", mount_point=path)["alias_name_source"] == "serviceaccount_uid"
    assert k8s.list_roles(mount_point=path)["keys"] == ["any", "app"]
    k8s.delete_role("any", mount_point=path)
    k8s.delete_role("never-was", mount_point=path)  # nonexistent: 204, as OpenBao
    with pytest.raises(hvac.exceptions.InvalidPath):
        k8s.read_role("any", mount_point=path)


def configure_for(client: hvac.Client, server: ReviewServer, path: str, **extra: Any) -> None:
    client.auth.kubernetes.configure(
        kubernetes_host=server.url,
        kubernetes_ca_cert=server.ca_file.read_text(),
        mount_point=path,
        **extra,
    )


def login(d: DevProcess, path: str, role: str, token: str) -> dict[str, Any]:
    return hvac.Client(url=d.secrets).auth.kubernetes.login(role, token, mount_point=path)


def test_login_accepted_and_refused(
    d: DevProcess, client: hvac.Client, review_server: ReviewServer
) -> None:
    path = mount(client)
    configure_for(
        client,
        review_server,
        path,
        token_reviewer_jwt=review_server.reviewer,
        pem_keys=[SIGNER_PEM],
    )
    client.auth.kubernetes.create_role(
        "app", ["vault-auth"], ["default"], audience="vault", policies=["app"], mount_point=path
    )
    good = Account("vault-auth", "default")
    token = make_jwt(good, ["vault"])
    review_server.known[token] = (good, ["vault"])
    auth = login(d, path, "app", token)["auth"]
    assert auth["policies"] == ["app", "default"]
    assert auth["metadata"] == {
        "role": "app",
        "service_account_name": "vault-auth",
        "service_account_namespace": "default",
        "service_account_uid": good.uid,
        "service_account_secret_name": "",
    }
    me = hvac.Client(url=d.secrets, token=auth["client_token"]).auth.token.lookup_self()["data"]
    assert me["display_name"] == f"{path}-default-vault-auth"
    # The login's alias (the service account's UID by default) links it to an entity.
    accessor = client.sys.list_auth_methods()[f"{path}/"]["accessor"]
    alias = client.read(f"identity/entity/id/{me['entity_id']}")["data"]["aliases"][0]
    assert (alias["name"], alias["mount_accessor"]) == (good.uid, accessor)
    # The review went out with the reviewer JWT as bearer and the role's audience.
    last = review_server.seen[-1]
    assert last["bearer"] == f"Bearer {review_server.reviewer}"
    assert last["body"]["spec"] == {"token": token, "audiences": ["vault"]}

    def refused(
        role: str, jwt: str, kind: type[hvac.exceptions.VaultError] = hvac.exceptions.Forbidden
    ) -> str:
        with pytest.raises(kind) as err:
            login(d, path, role, jwt)
        assert jwt not in str(err.value)
        return str(err.value)

    # Claims outside the role: another namespace, another service account.
    other_ns = Account("vault-auth", "kube-system")
    assert "namespace not authorized" in refused("app", make_jwt(other_ns, ["vault"]))
    other_sa = Account("intruder", "default")
    assert "service account name not authorized" in refused("app", make_jwt(other_sa, ["vault"]))
    # The review says the token is no longer valid (deleted service account).
    revoked = make_jwt(good, ["vault"])
    review_server.known[revoked] = (good, ["vault"])
    review_server.unauthenticated.add(revoked)
    refused("app", revoked)
    # Audience mismatch: in the JWT, and (a token the API server scopes elsewhere) in the review.
    assert "audience" in refused("app", make_jwt(good, ["someone-else"]))
    scoped = make_jwt(good, ["vault", "other"])
    review_server.known[scoped] = (good, ["other"])
    refused("app", scoped)
    # The review names another account than the claims (a forged, correctly signed JWT).
    forged = make_jwt(good, ["vault"])
    review_server.known[forged] = (Account("vault-auth", "default"), ["vault"])
    refused("app", forged)
    # A JWT signed by a key the config does not list.
    stranger = make_jwt(good, ["vault"], key=ec.generate_private_key(ec.SECP256R1()))
    review_server.known[stranger] = (good, ["vault"])
    assert "signature" in refused("app", stranger)
    # Expired, and not a JWT at all.
    refused("app", make_jwt(good, ["vault"], exp_in=-3600))
    refused("app", "not-a-jwt")
    # Unknown role and missing fields are 400s.
    refused("nope", token, hvac.exceptions.InvalidRequest)
    refused("", token, hvac.exceptions.InvalidRequest)


def test_login_without_reviewer_uses_client_jwt_and_checks_ca(
    d: DevProcess, client: hvac.Client, review_server: ReviewServer, tmp_path: Path
) -> None:
    path = mount(client)
    configure_for(client, review_server, path)
    client.auth.kubernetes.create_role("app", ["vault-auth"], ["*"], mount_point=path)
    acct = Account("vault-auth", f"ns-{uuid.uuid4().hex[:6]}")
    token = make_jwt(acct, ["https://kubernetes.default.svc"])
    review_server.known[token] = (acct, ["https://kubernetes.default.svc"])
    auth = login(d, path, "app", token)["auth"]
    assert auth["metadata"]["service_account_namespace"] == acct.namespace
    assert review_server.seen[-1]["bearer"] == f"Bearer {token}"
    # Another CA than the API server's: the TLS handshake fails and the login is refused.
    other, _ = server_tls(tmp_path)
    client.auth.kubernetes.configure(
        kubernetes_host=review_server.url,
        kubernetes_ca_cert=other.read_text(),
        mount_point=path,
    )
    with pytest.raises(hvac.exceptions.Forbidden):
        login(d, path, "app", token)
