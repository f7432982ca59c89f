"""The SSH engine through the gateway with a crypto worker: CA configuration, sign and issue,
OTP credentials with verify and lookup, zero-address roles, capabilities and refusals. hvac is
used unmodified for the calls it has; OpenSSH's ssh-keygen reads the certificates."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import hvac
import hvac.exceptions
import pytest

from services.crypto.ops import run_local
from services.crypto.service import CryptoService
from shared.bus import Bus
from tests.harness import Cluster, start_cluster

pytestmark = pytest.mark.nats


@pytest.fixture
async def cluster(nats_url: str) -> AsyncIterator[Cluster]:
    c = await start_cluster(nats_url)
    bus = await Bus.connect(nats_url, "crypto")
    try:
        worker = CryptoService(bus, c.settings)
        await worker.start()
        c.extra.append(worker)
        status, body = await c.request("POST", "/v1/sys/mounts/ssh", json={"type": "ssh"})
        assert status == 204, body
        yield c
    finally:
        await c.close()
        await bus.close()


def _hvac(c: Cluster, token: str | None = None) -> hvac.Client:
    return hvac.Client(url=c.secrets_url, token=token or c.root_token)


def _user_key() -> str:
    return run_local("ssh_generate_key", {"key_type": "ed25519"})["public_key"]


def _keygen_show(tmp: Path, cert: str) -> str:
    keygen = shutil.which("ssh-keygen")
    if keygen is None:
        pytest.fail("ssh-keygen (openssh-client) is not installed; ./test.sh installs it")
    (tmp / "c-cert.pub").write_text(cert)
    return subprocess.run(
        [keygen, "-L", "-f", str(tmp / "c-cert.pub")], check=True, capture_output=True, text=True
    ).stdout


async def _ok(
    c: Cluster,
    method: str,
    path: str,
    body: Any = None,
    status: int = 200,
    token: str | None = None,
) -> Any:
    got, data = await c.request(method, path, json=body, token=token)
    assert got == status, (method, path, got, data)
    return data


async def test_ca_sign_and_issue_with_hvac(cluster: Cluster, tmp_path: Path) -> None:
    c = cluster
    client = _hvac(c)
    gen = await asyncio.to_thread(client.secrets.ssh.submit_ca_information, key_type="ssh-ed25519")
    ca_pub = gen["data"]["public_key"]
    assert ca_pub.startswith("ssh-ed25519 ")
    assert (await asyncio.to_thread(client.secrets.ssh.read_public_key))["data"][
        "public_key"
    ] == ca_pub
    # public_key: no token, text/plain.
    async with aiohttp.ClientSession() as s, s.get(c.secrets_url + "/v1/ssh/public_key") as r:
        assert r.status == 200 and r.content_type == "text/plain"
        assert await r.text() == ca_pub

    # hvac's create_role sends every field ("" booleans, null maps, key_bits=1024).
    await asyncio.to_thread(
        client.secrets.ssh.create_role,
        name="dev",
        key_type="ca",
        allow_user_certificates=True,
        allowed_users="alice,bob",
        default_user="alice",
        allowed_extensions="permit-pty",
        default_extensions={"permit-pty": ""},
        ttl="30m",
        max_ttl="1h",
    )
    role = (await _ok(c, "GET", "/v1/ssh/roles/dev"))["data"]
    assert role["key_type"] == "ca" and role["max_ttl"] == 3600 and role["ttl"] == 1800
    assert role["default_extensions"] == {"permit-pty": ""} and "cidr_list" not in role
    listed = (await _ok(c, "LIST", "/v1/ssh/roles"))["data"]
    assert listed == {
        "keys": ["dev"],
        "key_info": {"dev": {"key_type": "ca", "issuer_ref": "default"}},
    }

    user = _user_key()
    signed = await asyncio.to_thread(client.secrets.ssh.sign_ssh_key, name="dev", public_key=user)
    assert signed["lease_id"].startswith("ssh/sign/dev/") and signed["lease_duration"] == 1800
    data = signed["data"]
    assert set(data) == {"serial_number", "signed_key", "issuer_id"}  # issuer_id: as OpenBao
    text = _keygen_show(tmp_path, data["signed_key"])
    digest = run_local("ssh_public_key_info", {"public_key": user})["sha256"]
    assert f'Key ID: "vault-root-{digest}"' in text
    assert f"Serial: {int(data['serial_number'], 16)}" in text
    assert text.split("Principals:")[1].split("Critical Options:")[0].split() == ["alice"]
    assert text.split("Extensions:")[1].split() == ["permit-pty"]

    both = await _ok(
        c,
        "POST",
        "/v1/ssh/sign/dev",
        {"public_key": user, "valid_principals": "bob,alice", "ttl": "10m"},
    )
    text = _keygen_show(tmp_path, both["data"]["signed_key"])
    assert text.split("Principals:")[1].split("Critical Options:")[0].split() == ["bob", "alice"]
    assert both["lease_duration"] == 600

    issued = await _ok(c, "POST", "/v1/ssh/issue/dev", {"key_type": "ec", "key_bits": 384})
    assert issued["data"]["private_key_type"] == "ec"
    assert "BEGIN EC PRIVATE KEY" in issued["data"]["private_key"]
    assert issued["data"]["signed_key"].startswith("ecdsa-sha2-nistp384-cert-v01@openssh.com ")

    # Importing a CA replaces the generated one and answers 204.
    pair = run_local("ssh_generate_key", {"key_type": "ec"})
    await _ok(
        c,
        "POST",
        "/v1/ssh/config/ca",
        {"private_key": pair["private_key"], "public_key": pair["public_key"]},
        204,
    )
    assert (await _ok(c, "GET", "/v1/ssh/config/ca"))["data"]["public_key"] == pair["public_key"]
    signed = await _ok(c, "POST", "/v1/ssh/sign/dev", {"public_key": user})
    assert "(using ecdsa-sha2-nistp256)" in _keygen_show(tmp_path, signed["data"]["signed_key"])

    await asyncio.to_thread(client.secrets.ssh.delete_ca_information)
    status, _ = await c.request("GET", "/v1/ssh/public_key", token="")
    assert status == 404
    status, body = await c.request("GET", "/v1/ssh/config/ca")
    assert status == 400 and "configured" in body["errors"][0]


async def test_refusals_name_the_problem(cluster: Cluster) -> None:
    c = cluster
    await _ok(c, "POST", "/v1/ssh/config/ca", {"key_type": "ed25519"})
    await _ok(
        c,
        "POST",
        "/v1/ssh/roles/dev",
        {
            "key_type": "ca",
            "allow_user_certificates": True,
            "allowed_users": "alice",
            "max_ttl": "1h",
            "allowed_user_key_lengths": {"ed25519": 0, "rsa": [4096]},
        },
        204,
    )
    await _ok(
        c,
        "POST",
        "/v1/ssh/roles/otp",
        {"key_type": "otp", "default_user": "u", "cidr_list": "10.0.0.0/8"},
        204,
    )
    user = _user_key()
    rsa2048 = run_local(
        "ssh_generate_key", {"key_type": "rsa", "key_bits": 2048, "purpose": "issue"}
    )["public_key"]
    cases: list[tuple[str, str, dict[str, Any], str]] = [
        ("POST", "sign/dev", {"public_key": "ssh-ed25519 AAAA!!"}, "failed to parse public_key"),
        ("POST", "sign/dev", {"public_key": "not a key"}, "failed to parse public_key"),
        ("POST", "sign/dev", {}, "missing public_key"),
        (
            "POST",
            "sign/dev",
            {"public_key": user, "valid_principals": "root"},
            "root is not a valid value for valid_principals",
        ),
        (
            "POST",
            "sign/dev",
            {"public_key": user, "valid_principals": "alice", "ttl": "2h"},
            "ttl is larger than the maximum allowed",
        ),
        (
            "POST",
            "sign/dev",
            {"public_key": user, "valid_principals": "alice", "cert_type": "host"},
            "cert_type 'host' is not allowed",
        ),
        (
            "POST",
            "sign/dev",
            {"public_key": user, "valid_principals": "alice", "key_id": "me"},
            "setting key_id is not allowed",
        ),
        (
            "POST",
            "sign/dev",
            {"public_key": user, "valid_principals": "alice", "extensions": {"permit-pty": ""}},
            "extensions not on the allowed",
        ),
        (
            "POST",
            "sign/dev",
            {"public_key": rsa2048, "valid_principals": "alice"},
            "key is of an invalid size: 2048",
        ),
        ("POST", "sign/nope", {"public_key": user}, "unknown role: nope"),
        ("POST", "sign/otp", {"public_key": user}, "only ca roles sign keys"),
        (
            "POST",
            "issue/dev",
            {"key_type": "dsa", "valid_principals": "alice"},
            "unsupported key_type",
        ),
        (
            "POST",
            "issue/dev",
            {"key_type": "rsa", "valid_principals": "alice"},
            "invalid size: 2048",
        ),
        ("POST", "config/ca", {"key_type": "ssh-dss"}, "unsupported key_type"),
        ("POST", "config/ca", {"key_type": "rsa", "key_bits": 1000}, "invalid key_bits 1000"),
        ("POST", "config/ca", {"generate_signing_key": False}, "missing public_key"),
        (
            "POST",
            "config/ca",
            {"generate_signing_key": True, "public_key": user},
            "must not be set",
        ),
        (
            "POST",
            "config/ca",
            {"private_key": "junk", "public_key": user},
            "failed to parse the private key",
        ),
        ("POST", "roles/bad", {"key_type": "ca"}, "allow_user_certificates"),
        (
            "POST",
            "roles/bad",
            {"key_type": "ca", "allow_user_certificates": True, "ttl": "2h", "max_ttl": "1h"},
            "must be less than",
        ),
        (
            "POST",
            "keys/admin",
            {"key": "-----BEGIN RSA PRIVATE KEY-----\nxx\n"},
            "failed to parse the private key",
        ),
        (
            "POST",
            "roles/dyn",
            {
                "key_type": "dynamic",
                "key": "missing",
                "admin_user": "a",
                "default_user": "u",
                "cidr_list": "10.0.0.0/8",
            },
            "no key of that name",
        ),
        ("POST", "creds/otp", {"ip": "192.168.1.1"}, "does not belong to role"),
        ("POST", "creds/otp", {"ip": "nonsense"}, "invalid IP address"),
        ("POST", "creds/otp", {}, "missing ip"),
        ("POST", "creds/dev", {"ip": "10.0.0.1"}, "sign keys with it"),
        ("POST", "lookup", {"ip": "x"}, "invalid IP address"),
        ("POST", "config/zeroaddress", {"roles": "ghost"}, "does not exist"),
    ]
    for method, path, body, message in cases:
        status, got = await c.request(method, f"/v1/ssh/{path}", json=body)
        assert 400 <= status < 500, (path, body, status, got)
        assert message in got["errors"][0], (path, body, got)


async def test_sign_needs_create_without_a_ca(cluster: Cluster) -> None:
    """Seed: signing needs create and update; with only update and no CA key it is an error;
    with create the CA key is made from the defaults."""
    c = cluster
    await _ok(
        c,
        "POST",
        "/v1/ssh/roles/dev",
        {"key_type": "ca", "allow_user_certificates": True, "allowed_users": "*"},
        204,
    )
    for name, caps in (("upd", '["update"]'), ("both", '["create", "update"]')):
        await _ok(
            c,
            "POST",
            f"/v1/sys/policies/acl/{name}",
            {"policy": f'path "ssh/sign/*" {{ capabilities = {caps} }}'},
            204,
        )
    upd = (await _ok(c, "POST", "/v1/auth/token/create", {"policies": ["upd"]}))["auth"]
    both = (await _ok(c, "POST", "/v1/auth/token/create", {"policies": ["both"]}))["auth"]
    body = {"public_key": _user_key(), "valid_principals": "alice"}

    status, got = await c.request("POST", "/v1/ssh/sign/dev", json=body, token=upd["client_token"])
    assert status == 403, got
    assert (await c.request("GET", "/v1/ssh/public_key", token=""))[0] == 404

    signed = await _ok(c, "POST", "/v1/ssh/sign/dev", body, token=both["client_token"])
    assert signed["data"]["signed_key"].startswith("ssh-ed25519-cert-v01@openssh.com ")
    status, ca_text = await c.request("GET", "/v1/ssh/public_key", token="")
    assert status == 200 and ca_text.startswith("ssh-rsa ")
    assert run_local("ssh_public_key_info", {"public_key": ca_text})["bits"] == 4096

    # Now that the CA exists, update capability alone is enough.
    await _ok(c, "POST", "/v1/ssh/sign/dev", body, token=upd["client_token"])


async def test_otp_credentials_verify_once(cluster: Cluster) -> None:
    c = cluster
    client = _hvac(c)
    await asyncio.to_thread(
        client.secrets.ssh.create_role,
        name="web",
        key_type="otp",
        default_user="ubuntu",
        cidr_list="10.0.0.0/8,fd00::/8",
        exclude_cidr_list="10.9.0.0/16",
        allowed_users="deploy",
    )
    role = (await _ok(c, "GET", "/v1/ssh/roles/web"))["data"]
    assert {k: role[k] for k in ("key_type", "default_user", "cidr_list", "port")} == {
        "key_type": "otp",
        "default_user": "ubuntu",
        "cidr_list": "10.0.0.0/8,fd00::/8",
        "port": 22,
    }
    assert "allowed_extensions" not in role

    creds = await asyncio.to_thread(
        client.secrets.ssh.generate_ssh_credentials, name="web", ip="10.1.2.3"
    )
    assert creds["lease_id"].startswith("ssh/creds/web/")
    assert creds["renewable"] is False and creds["lease_duration"] == 2764800
    otp = creds["data"]["key"]
    assert creds["data"] == {
        "key": otp,
        "key_type": "otp",
        "username": "ubuntu",
        "ip": "10.1.2.3",
        "port": 22,
    }

    anon = hvac.Client(url=c.secrets_url)
    verified = await asyncio.to_thread(anon.secrets.ssh.verify_ssh_otp, otp=otp)
    assert verified["data"]["username"] == "ubuntu" and verified["data"]["ip"] == "10.1.2.3"
    with pytest.raises(hvac.exceptions.InvalidRequest, match="OTP not found"):
        await asyncio.to_thread(anon.secrets.ssh.verify_ssh_otp, otp=otp)
    echo = await _ok(c, "POST", "/v1/ssh/verify", {"otp": "verify-echo-request"}, token="")
    assert echo["data"] == {"message": "verify-echo-response"}

    # allowed_users: the default user and the listed ones only.
    other = await _ok(c, "POST", "/v1/ssh/creds/web", {"ip": "fd00::5", "username": "deploy"})
    assert other["data"]["username"] == "deploy" and other["data"]["ip"] == "fd00::5"
    status, body = await c.request(
        "POST", "/v1/ssh/creds/web", json={"ip": "10.1.2.3", "username": "root"}
    )
    assert status == 400 and "allowed_users" in body["errors"][0]
    status, body = await c.request("POST", "/v1/ssh/creds/web", json={"ip": "10.9.0.1"})
    assert status == 400 and "does not belong" in body["errors"][0]

    # Revoking the lease of an unused OTP makes it unusable.
    await _ok(c, "PUT", "/v1/sys/leases/revoke", {"lease_id": other["lease_id"]}, 204)
    status, body = await c.request(
        "POST", "/v1/ssh/verify", token="", json={"otp": other["data"]["key"]}
    )
    assert status == 400 and body["errors"] == ["OTP not found"]

    # Two concurrent verifications of one OTP: exactly one wins.
    fresh = await _ok(c, "POST", "/v1/ssh/creds/web", {"ip": "10.0.0.7"})
    results = await asyncio.gather(
        *(
            c.request("POST", "/v1/ssh/verify", token="", json={"otp": fresh["data"]["key"]})
            for _ in range(4)
        )
    )
    assert sorted(s for s, _ in results) == [200, 400, 400, 400]


async def test_lookup_and_zero_address(cluster: Cluster) -> None:
    c = cluster
    client = _hvac(c)
    await _ok(
        c,
        "POST",
        "/v1/ssh/roles/lan",
        {"key_type": "otp", "default_user": "u", "cidr_list": "192.168.0.0/16"},
        204,
    )
    await _ok(c, "POST", "/v1/ssh/roles/any", {"key_type": "otp", "default_user": "u"}, 204)
    found = await asyncio.to_thread(client.secrets.ssh.list_roles_by_ip, ip="192.168.4.4")
    assert found["data"]["roles"] == ["lan"]
    assert (await _ok(c, "POST", "/v1/ssh/lookup", {"ip": "8.8.8.8"}))["data"]["roles"] == []

    status, _ = await c.request("GET", "/v1/ssh/config/zeroaddress")
    assert status == 404
    status, body = await c.request("POST", "/v1/ssh/creds/any", json={"ip": "8.8.8.8"})
    assert status == 400, body
    await asyncio.to_thread(client.secrets.ssh.configure_zeroaddress_roles, roles="any")
    assert (await _ok(c, "GET", "/v1/ssh/config/zeroaddress"))["data"]["roles"] == ["any"]
    creds = await _ok(c, "POST", "/v1/ssh/creds/any", {"ip": "8.8.8.8"})
    assert creds["data"]["ip"] == "8.8.8.8"
    assert (await _ok(c, "POST", "/v1/ssh/lookup", {"ip": "8.8.8.8"}))["data"]["roles"] == ["any"]

    # Deleting a role drops it from the zero-address list.
    await _ok(c, "DELETE", "/v1/ssh/roles/any", status=204)
    assert (await _ok(c, "GET", "/v1/ssh/config/zeroaddress"))["data"]["roles"] == []
    await _ok(c, "DELETE", "/v1/ssh/config/zeroaddress", status=204)
    await _ok(c, "DELETE", "/v1/ssh/roles/lan", status=204)
    status, _ = await c.request("LIST", "/v1/ssh/roles")
    assert status == 404


async def test_dynamic_role_and_unreachable_host(cluster: Cluster) -> None:
    c = cluster
    admin = run_local("ssh_generate_key", {"key_type": "ed25519"})["private_key"]
    await _ok(c, "POST", "/v1/ssh/keys/admin", {"key": admin}, 204)
    await _ok(
        c,
        "POST",
        "/v1/ssh/roles/dyn",
        {
            "key_type": "dynamic",
            "key": "admin",
            "admin_user": "root",
            "default_user": "app",
            "cidr_list": "127.0.0.0/8",
            "port": 1,
            "key_bits": 2048,
        },
        204,
    )
    role = (await _ok(c, "GET", "/v1/ssh/roles/dyn"))["data"]
    assert {
        k: role[k] for k in ("admin_user", "cidr_list", "default_user", "key", "key_type", "port")
    } == {
        "admin_user": "root",
        "cidr_list": "127.0.0.0/8",
        "default_user": "app",
        "key": "admin",
        "key_type": "dynamic",
        "port": 1,
    }
    assert role["key_bits"] == 2048 and "install_script" in role
    listed = (await _ok(c, "LIST", "/v1/ssh/roles"))["data"]["key_info"]
    assert listed == {"dyn": {"key_type": "dynamic"}}
    # Nothing listens on port 1: the engine says so (502) instead of failing opaquely.
    status, body = await c.request("POST", "/v1/ssh/creds/dyn", json={"ip": "127.0.0.1"})
    assert status == 502 and "127.0.0.1:1" in body["errors"][0], body
    await _ok(c, "DELETE", "/v1/ssh/keys/admin", status=204)
    status, body = await c.request("POST", "/v1/ssh/creds/dyn", json={"ip": "127.0.0.1"})
    assert status == 400 and "no longer registered" in body["errors"][0]
