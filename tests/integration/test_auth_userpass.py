"""The userpass auth method through the gateway: users, logins, policies, token settings, and
hvac unmodified."""

from __future__ import annotations

import asyncio
from typing import Any

import hvac
import pytest

from services.secrets.core.namespaces import ROOT
from tests.harness import Cluster, start_cluster

pytestmark = pytest.mark.nats

READER = (
    'path "secret/data/*" { capabilities = ["read"] }\n'
    'path "sys/policies/acl/*" { capabilities = ["read"] }\n'
)


async def _enable(c: Cluster, path: str = "userpass") -> None:
    status, body = await c.request("POST", f"/v1/sys/auth/{path}", json={"type": "userpass"})
    assert status == 204, body


def _serving(c: Cluster, mount: str) -> bool:
    return all(
        svc.core is not None
        and not svc.core.sealed
        and (not mount or mount in svc.core.table(ROOT).entries)
        for svc in c.secrets
    )


async def _settle(c: Cluster, mount: str = "") -> None:
    """Wait (bounded) until every replica is unsealed and serves `mount`: the harness returns
    once one replica is unsealed, and a new mount reaches the others a moment later (see the
    replica test below)."""
    deadline = asyncio.get_running_loop().time() + 5
    while not _serving(c, mount):
        assert asyncio.get_running_loop().time() < deadline, "a replica never caught up"
        await asyncio.sleep(0.01)


async def _login(c: Cluster, user: str, password: str, path: str = "userpass") -> tuple[int, Any]:
    return await c.request(
        "POST", f"/v1/auth/{path}/login/{user}", token="", json={"password": password}
    )


async def _kv_mounted(c: Cluster) -> bool:
    status, body = await c.request("GET", "/v1/sys/mounts")
    return status == 200 and "secret/" in body["data"]


async def test_userpass_users_login_and_policies(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        await _enable(c)
        status, body = await c.request(
            "PUT", "/v1/sys/policies/acl/reader", json={"policy": READER}
        )
        assert status in (200, 204), body

        # Create (policies as a comma string, the way the CLI sends it); names are lowercased.
        status, body = await c.request(
            "POST",
            "/v1/auth/userpass/users/Alice",
            json={"password": "s3cret", "policies": "Reader"},
        )
        assert status == 204, body
        status, body = await c.request("GET", "/v1/auth/userpass/users/ALICE")
        assert status == 200, body
        data = body["data"]
        assert data["token_policies"] == ["reader"] and data["policies"] == ["reader"]
        assert "password" not in data and data["token_type"] == "default"
        status, body = await c.request("LIST", "/v1/auth/userpass/users")
        assert status == 200 and body["data"]["keys"] == ["alice"]
        status, body = await c.request("GET", "/v1/auth/userpass/users?list=true")
        assert status == 200 and body["data"]["keys"] == ["alice"]

        # Log in without a token, any case of the name.
        status, body = await _login(c, "aLiCe", "s3cret")
        assert status == 200, body
        auth = body["auth"]
        assert auth["policies"] == ["default", "reader"]
        assert auth["metadata"] == {"username": "alice"}
        assert auth["renewable"] is True and auth["lease_duration"] > 0
        token = auth["client_token"]

        status, body = await c.request("GET", "/v1/auth/token/lookup-self", token=token)
        assert status == 200, body
        assert body["data"]["display_name"] == "userpass-alice"
        assert body["data"]["policies"] == ["default", "reader"]

        # The policy applies: allowed where it says, 403 elsewhere.
        status, body = await c.request("GET", "/v1/sys/policies/acl/reader", token=token)
        assert status == 200, body
        status, _ = await c.request(
            "PUT", "/v1/sys/policies/acl/evil", token=token, json={"policy": READER}
        )
        assert status == 403
        status, _ = await c.request("GET", "/v1/sys/mounts", token=token)
        assert status == 403
        status, _ = await c.request("LIST", "/v1/auth/userpass/users", token=token)
        assert status == 403
        if await _kv_mounted(c):
            status, body = await c.request("POST", "/v1/secret/data/app", json={"data": {"k": "v"}})
            assert status == 200, body
            status, body = await c.request("GET", "/v1/secret/data/app", token=token)
            assert status == 200 and body["data"]["data"] == {"k": "v"}
            status, _ = await c.request(
                "POST", "/v1/secret/data/app", token=token, json={"data": {"k": "x"}}
            )
            assert status == 403

        # Bad credentials: 400, the same message for a wrong password and an unknown user.
        wrong = await _login(c, "alice", "nope")
        unknown = await _login(c, "bob", "nope")
        empty = await _login(c, "alice", "")
        for status, body in (wrong, unknown, empty):
            assert status == 400 and body["errors"] == ["invalid username or password"]

        # Password change: the old one stops working.
        status, body = await c.request(
            "POST", "/v1/auth/userpass/users/alice/password", json={"password": "n3w"}
        )
        assert status == 204, body
        assert (await _login(c, "alice", "s3cret"))[0] == 400
        assert (await _login(c, "alice", "n3w"))[0] == 200

        # Policies endpoint (token_policies drops the deprecated echo).
        status, body = await c.request(
            "POST",
            "/v1/auth/userpass/users/alice/policies",
            json={"token_policies": ["a", "B", "a"]},
        )
        assert status == 204, body
        status, body = await c.request("GET", "/v1/auth/userpass/users/alice")
        assert body["data"]["token_policies"] == ["a", "b"] and "policies" not in body["data"]
        status, body = await _login(c, "alice", "n3w")
        assert status == 200 and body["auth"]["policies"] == ["a", "b", "default"]

        # An update without a password keeps it.
        status, body = await c.request(
            "POST", "/v1/auth/userpass/users/alice", json={"token_ttl": "1h"}
        )
        assert status == 204, body
        assert (await _login(c, "alice", "n3w"))[0] == 200

        # The login token still works after its user goes (as in Vault); the user does not.
        status, _ = await c.request("DELETE", "/v1/auth/userpass/users/alice")
        assert status == 204
        assert (await _login(c, "alice", "n3w"))[0] == 400
        status, _ = await c.request("GET", "/v1/auth/userpass/users/alice")
        assert status == 404
        status, _ = await c.request("LIST", "/v1/auth/userpass/users")
        assert status == 404
        status, _ = await c.request("GET", "/v1/auth/token/lookup-self", token=token)
        assert status == 200
    finally:
        await c.close()


async def test_userpass_token_settings_and_renewal(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        await _enable(c, "up")
        status, body = await c.request(
            "PUT", "/v1/sys/policies/acl/reader", json={"policy": READER}
        )
        assert status in (200, 204), body
        users = {
            "ttl": {"token_ttl": "30m", "token_max_ttl": "1h"},
            "uses": {
                "token_num_uses": 2,
                "token_no_default_policy": True,
                "token_policies": "reader",
            },
            "period": {"token_period": "10m", "token_type": "service"},
            "legacy": {"ttl": 600, "max_ttl": "20m", "bound_cidrs": "127.0.0.1/32"},
            "far": {"token_bound_cidrs": ["10.0.0.0/8"]},
            "near": {"token_bound_cidrs": "127.0.0.0/8,::1/128"},
            "explicit": {"token_ttl": "1h", "token_explicit_max_ttl": "15m"},
        }
        for name, extra in users.items():
            status, body = await c.request(
                "POST", f"/v1/auth/up/users/{name}", json={"password": "pw", **extra}
            )
            assert status == 204, (name, body)

        status, body = await c.request("GET", "/v1/auth/up/users/ttl")
        assert body["data"]["token_ttl"] == 1800 and body["data"]["token_max_ttl"] == 3600
        status, body = await c.request("GET", "/v1/auth/up/users/legacy")
        d = body["data"]
        assert (d["ttl"], d["max_ttl"], d["bound_cidrs"]) == (600, 1200, ["127.0.0.1/32"])
        assert (d["token_ttl"], d["token_max_ttl"]) == (600, 1200)

        # TTL and renewal capped by token_max_ttl.
        status, body = await c.request(
            "POST", "/v1/auth/up/login/ttl", token="", json={"password": "pw"}
        )
        assert status == 200 and body["auth"]["lease_duration"] == 1800
        tok = body["auth"]["client_token"]
        status, body = await c.request(
            "POST", "/v1/auth/token/renew-self", token=tok, json={"increment": "2h"}
        )
        assert status == 200, body
        assert 3500 <= body["auth"]["lease_duration"] <= 3600

        # Use-limited, no default policy. Denied requests do not spend a use.
        status, body = await c.request(
            "POST", "/v1/auth/up/login/uses", token="", json={"password": "pw"}
        )
        assert status == 200 and body["auth"]["policies"] == ["reader"]
        assert body["auth"]["num_uses"] == 2
        tok = body["auth"]["client_token"]
        status, _ = await c.request("POST", "/v1/cubbyhole/x", token=tok, json={"a": "b"})
        assert status == 403  # no default policy, so no cubbyhole
        status, _ = await c.request("GET", "/v1/auth/token/lookup-self", token=tok)
        assert status == 403
        for _ in range(2):
            status, body = await c.request("GET", "/v1/sys/policies/acl/reader", token=tok)
            assert status == 200, body
        status, _ = await c.request("GET", "/v1/sys/policies/acl/reader", token=tok)
        assert status == 403  # both uses spent

        # Periodic tokens.
        status, body = await c.request(
            "POST", "/v1/auth/up/login/period", token="", json={"password": "pw"}
        )
        assert status == 200 and body["auth"]["lease_duration"] == 600
        tok = body["auth"]["client_token"]
        status, body = await c.request("GET", "/v1/auth/token/lookup-self", token=tok)
        assert body["data"]["period"] == 600

        # token_explicit_max_ttl caps the TTL and every renewal.
        status, body = await c.request(
            "POST", "/v1/auth/up/login/explicit", token="", json={"password": "pw"}
        )
        assert status == 200 and body["auth"]["lease_duration"] == 900
        tok = body["auth"]["client_token"]
        status, body = await c.request(
            "POST", "/v1/auth/token/renew-self", token=tok, json={"increment": "1h"}
        )
        assert status == 200 and 890 <= body["auth"]["lease_duration"] <= 900

        # Bound CIDRs: the test client comes from 127.0.0.1.
        status, _ = await c.request(
            "POST", "/v1/auth/up/login/far", token="", json={"password": "pw"}
        )
        assert status == 403
        status, body = await c.request(
            "POST", "/v1/auth/up/login/near", token="", json={"password": "pw"}
        )
        assert status == 200, body
        status, body = await c.request(
            "POST", "/v1/auth/up/login/legacy", token="", json={"password": "pw"}
        )
        assert status == 200 and body["auth"]["lease_duration"] == 600
    finally:
        await c.close()


async def test_userpass_periodic_token_keeps_explicit_max_ttl(nats_url: str) -> None:
    """Vault: a periodic login token with token_explicit_max_ttl renews by its period but
    never past the explicit max."""
    c = await start_cluster(nats_url)
    try:
        await _enable(c)
        status, body = await c.request(
            "POST",
            "/v1/auth/userpass/users/p",
            json={"password": "pw", "token_period": "10m", "token_explicit_max_ttl": "15m"},
        )
        assert status == 204, body
        status, body = await _login(c, "p", "pw")
        assert status == 200 and body["auth"]["lease_duration"] == 600
        status, body = await c.request(
            "GET", "/v1/auth/token/lookup-self", token=body["auth"]["client_token"]
        )
        assert status == 200
        assert body["data"]["period"] == 600 and body["data"]["explicit_max_ttl"] == 900
    finally:
        await c.close()


async def test_userpass_bad_input_is_4xx(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        await _enable(c)
        cases: list[tuple[str, str, Any, int]] = [
            ("POST", "users/nopw", {"policies": "a"}, 400),  # create needs a password
            ("POST", "users/x", {"password": "p", "token_ttl": "soon"}, 400),
            ("POST", "users/x", {"password": "p", "token_ttl": "2h", "token_max_ttl": "1h"}, 400),
            ("POST", "users/x", {"password": "p", "token_num_uses": -1}, 400),
            ("POST", "users/x", {"password": "p", "token_bound_cidrs": "nonsense"}, 400),
            ("POST", "users/x", {"password": "p", "token_type": "batchy"}, 400),
            ("POST", "users/x", {"password": "p", "token_type": "weird"}, 400),
            ("POST", "users/x", {"password": "p", "policies": "a", "token_policies": "b"}, 400),
            ("POST", "users/x", {"password": "p", "token_no_default_policy": "maybe"}, 400),
            ("POST", "users/x", {"password": ["p"]}, 400),
            ("POST", "users/bad%20name", {"password": "p"}, 404),
            ("POST", "users/trailing.", {"password": "p"}, 404),
            ("POST", "users/" + "a" * 300, {"password": "p"}, 400),  # names become keys
            ("POST", "login/" + "a" * 300, {"password": "p"}, 400),
            ("POST", "users/ghost/password", {"password": "p"}, 400),
            ("POST", "users/ghost/policies", {"policies": "a"}, 400),
            ("POST", "users/ghost/password", {}, 400),
            ("GET", "users/ghost", None, 404),
            ("DELETE", "users/ghost", None, 204),
            ("PATCH", "users/ghost", {}, 405),
        ]
        for method, path, payload, want in cases:
            status, body = await c.request(method, f"/v1/auth/userpass/{path}", json=payload)
            assert status == want, (method, path, payload, status, body)
            if status >= 400:
                assert body["errors"] is not None
        # The write with a bad field left nothing behind.
        status, _ = await c.request("GET", "/v1/auth/userpass/users/x")
        assert status == 404
        # A body that is not an object, and a login without a password.
        status, _ = await c.request("POST", "/v1/auth/userpass/login/x", token="", json=[1])
        assert status == 400
        status, body = await c.request("POST", "/v1/auth/userpass/login/x", token="", json={})
        assert status == 400 and body["errors"] == ["invalid username or password"]
        # Management needs a token; login does not.
        status, _ = await c.request(
            "POST", "/v1/auth/userpass/users/x", token="", json={"password": "p"}
        )
        assert status == 403
        # The OpenAPI document still builds with these paths.
        status, body = await c.request("GET", "/v1/auth/userpass/users/x?help=1")
        assert status == 200 and "openapi" in body
    finally:
        await c.close()


async def test_userpass_concurrent_logins_and_replicas(nats_url: str) -> None:
    """Logins on two replicas at once: every one succeeds, and the event loop stays free."""
    c = await start_cluster(nats_url, replicas=2)
    try:
        await _settle(c)
        await _enable(c)
        await _settle(c, "auth/userpass/")
        for i in range(3):
            status, body = await c.request(
                "POST", f"/v1/auth/userpass/users/u{i}", json={"password": f"pw{i}"}
            )
            assert status == 204, body
        results = await asyncio.gather(
            *(_login(c, f"u{i % 3}", f"pw{i % 3}") for i in range(6)), _login(c, "u0", "wrong")
        )
        assert [s for s, _ in results] == [200] * 6 + [400]
        tokens = {b["auth"]["client_token"] for _, b in results[:6]}
        assert len(tokens) == 6
        for tok in tokens:
            status, _ = await c.request("GET", "/v1/auth/token/lookup-self", token=tok)
            assert status == 200
    finally:
        await c.close()


async def test_userpass_with_hvac(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        client = hvac.Client(url=c.secrets_url, token=c.root_token)
        await asyncio.to_thread(client.sys.enable_auth_method, "userpass")
        await asyncio.to_thread(
            client.auth.userpass.create_or_update_user, "carol", password="pw", policies=["reader"]
        )
        users = await asyncio.to_thread(client.auth.userpass.list_user)
        assert users["data"]["keys"] == ["carol"]
        user = await asyncio.to_thread(client.auth.userpass.read_user, "carol")
        assert user["data"]["token_policies"] == ["reader"]

        login_client = hvac.Client(url=c.secrets_url)
        resp = await asyncio.to_thread(login_client.auth.userpass.login, "carol", "pw")
        assert resp["auth"]["policies"] == ["default", "reader"]
        assert login_client.token == resp["auth"]["client_token"]
        assert await asyncio.to_thread(login_client.is_authenticated)
        me = await asyncio.to_thread(login_client.auth.token.lookup_self)
        assert me["data"]["meta"] == {"username": "carol"}

        with pytest.raises(hvac.exceptions.InvalidRequest):
            await asyncio.to_thread(
                hvac.Client(url=c.secrets_url).auth.userpass.login, "carol", "bad"
            )
        await asyncio.to_thread(client.auth.userpass.update_password_on_user, "carol", "pw2")
        resp = await asyncio.to_thread(
            hvac.Client(url=c.secrets_url).auth.userpass.login, "carol", "pw2"
        )
        assert resp["auth"]["client_token"]
        await asyncio.to_thread(client.auth.userpass.delete_user, "carol")
        with pytest.raises(hvac.exceptions.InvalidRequest):
            await asyncio.to_thread(
                hvac.Client(url=c.secrets_url).auth.userpass.login, "carol", "pw2"
            )
    finally:
        await c.close()


async def test_new_auth_mount_is_usable_on_every_replica_at_once(nats_url: str) -> None:
    """Read-your-writes across replicas: once `sys/auth/<path>` answers 204, a request to the
    new mount must not get "no mount at this path" from a replica that has not reloaded yet.
    Each round enables a mount and uses it straight away (the gateway picks any replica)."""
    c = await start_cluster(nats_url, replicas=2)
    try:
        await _settle(c)  # every replica unsealed; from here on, no waiting
        misses = []
        for i in range(8):
            await _enable(c, f"up{i}")
            status, body = await c.request(
                "POST", f"/v1/auth/up{i}/users/u", json={"password": "pw"}
            )
            if status != 204:
                misses.append((i, status, body))
        assert not misses, misses
    finally:
        await c.close()
