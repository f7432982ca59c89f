"""The approle auth method through the gateway: roles, role ids, secret ids (generated, custom,
use-limited, expiring), logins, and hvac unmodified."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import hvac
import pytest

from services.secrets.core.namespaces import ROOT
from tests.harness import Cluster, start_cluster

pytestmark = pytest.mark.nats

READER = 'path "sys/policies/acl/*" { capabilities = ["read"] }\n'
INVALID = ["invalid role or secret ID"]


async def _setup(c: Cluster, path: str = "approle") -> str:
    await _settle(c, "")
    status, body = await c.request("POST", f"/v1/sys/auth/{path}", json={"type": "approle"})
    assert status == 204, body
    status, body = await c.request("PUT", "/v1/sys/policies/acl/reader", json={"policy": READER})
    assert status in (200, 204), body
    await _settle(c, f"auth/{path}/")
    return f"/v1/auth/{path}"


async def _settle(c: Cluster, mount: str) -> None:
    """Wait (bounded) until every replica is unsealed and serves `mount` (replicas catch up a
    moment after the one that answered; see test_auth_userpass.py)."""
    deadline = asyncio.get_running_loop().time() + 5
    while not all(
        s.core is not None
        and not s.core.sealed
        and (not mount or mount in s.core.table(ROOT).entries)
        for s in c.secrets
    ):
        assert asyncio.get_running_loop().time() < deadline, "a replica never caught up"
        await asyncio.sleep(0.01)


async def _role_id(c: Cluster, base: str, role: str) -> str:
    status, body = await c.request("GET", f"{base}/role/{role}/role-id")
    assert status == 200, body
    return body["data"]["role_id"]


async def _secret(c: Cluster, base: str, role: str, **payload: Any) -> dict[str, Any]:
    status, body = await c.request("POST", f"{base}/role/{role}/secret-id", json=payload)
    assert status == 200, body
    return body["data"]


async def _login(c: Cluster, base: str, role_id: str, secret_id: str | None) -> tuple[int, Any]:
    payload: dict[str, Any] = {"role_id": role_id}
    if secret_id is not None:
        payload["secret_id"] = secret_id
    return await c.request("POST", f"{base}/login", token="", json=payload)


async def test_approle_roles_secret_ids_and_login(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        base = await _setup(c)
        status, body = await c.request(
            "POST",
            f"{base}/role/Web",
            json={
                "token_policies": "reader",
                "token_ttl": "20m",
                "token_max_ttl": "30m",
                "secret_id_ttl": "10m",
                "secret_id_num_uses": 5,
            },
        )
        assert status == 204, body
        status, body = await c.request("GET", f"{base}/role/web")
        assert status == 200, body
        d = body["data"]
        assert d["token_policies"] == ["reader"] and d["bind_secret_id"] is True
        assert (d["token_ttl"], d["token_max_ttl"]) == (1200, 1800)
        assert (d["secret_id_ttl"], d["secret_id_num_uses"]) == (600, 5)
        assert d["local_secret_ids"] is False and d["secret_id_bound_cidrs"] == []
        status, body = await c.request("LIST", f"{base}/role")
        assert status == 200 and body["data"]["keys"] == ["web"]

        role_id = await _role_id(c, base, "web")
        secret = await _secret(c, base, "web", metadata=json.dumps({"team": "blue"}))
        assert secret["secret_id_ttl"] == 600 and secret["secret_id_num_uses"] == 5
        assert secret["secret_id"] != secret["secret_id_accessor"]

        status, body = await c.request("LIST", f"{base}/role/web/secret-id")
        assert status == 200 and body["data"]["keys"] == [secret["secret_id_accessor"]]
        status, body = await c.request(
            "POST", f"{base}/role/web/secret-id/lookup", json={"secret_id": secret["secret_id"]}
        )
        assert status == 200, body
        assert body["data"]["metadata"] == {"team": "blue"}
        assert body["data"]["secret_id_accessor"] == secret["secret_id_accessor"]
        assert body["data"]["expiration_time"].endswith("Z")
        status, body = await c.request(
            "POST",
            f"{base}/role/web/secret-id-accessor/lookup",
            json={"secret_id_accessor": secret["secret_id_accessor"]},
        )
        assert status == 200 and body["data"]["secret_id_num_uses"] == 5

        # Log in without a token; the token carries the role's policies and TTL.
        status, body = await _login(c, base, role_id, secret["secret_id"])
        assert status == 200, body
        auth = body["auth"]
        assert auth["policies"] == ["default", "reader"] and auth["lease_duration"] == 1200
        assert auth["metadata"] == {"team": "blue", "role_name": "Web"}
        token = auth["client_token"]
        status, _ = await c.request("GET", "/v1/sys/policies/acl/reader", token=token)
        assert status == 200
        status, _ = await c.request("GET", "/v1/sys/mounts", token=token)
        assert status == 403
        status, _ = await c.request("POST", f"{base}/role/web/secret-id", token=token)
        assert status == 403
        status, body = await c.request("GET", "/v1/auth/token/lookup-self", token=token)
        assert status == 200 and body["data"]["display_name"] == "approle"
        status, body = await c.request(
            "POST", "/v1/auth/token/renew-self", token=token, json={"increment": "1h"}
        )
        assert status == 200 and 1700 <= body["auth"]["lease_duration"] <= 1800

        # The use was counted.
        status, body = await c.request(
            "POST", f"{base}/role/web/secret-id/lookup", json={"secret_id": secret["secret_id"]}
        )
        assert body["data"]["secret_id_num_uses"] == 4

        # Wrong secret, wrong role id, missing parts.
        assert await _login(c, base, role_id, "nope") == (400, {"errors": INVALID})
        assert await _login(c, base, "nope", secret["secret_id"]) == (400, {"errors": INVALID})
        status, body = await _login(c, base, role_id, None)
        assert status == 400 and body["errors"] == ["missing secret_id"]
        status, body = await _login(c, base, "", "x")
        assert status == 400 and body["errors"] == ["missing role_id"]

        # Custom role id: unique across roles; the old one stops working.
        status, body = await c.request(
            "POST", f"{base}/role/web/role-id", json={"role_id": "web-role-id"}
        )
        assert status == 204, body
        assert await _role_id(c, base, "web") == "web-role-id"
        assert (await _login(c, base, role_id, secret["secret_id"]))[0] == 400
        assert (await _login(c, base, "web-role-id", secret["secret_id"]))[0] == 200
        status, body = await c.request(
            "POST", f"{base}/role/other", json={"role_id": "web-role-id"}
        )
        assert status == 400 and body["errors"] == ["role_id already in use"]
        status, _ = await c.request("GET", f"{base}/role/other")
        assert status == 404

        # Custom secret id.
        status, body = await c.request(
            "POST",
            f"{base}/role/web/custom-secret-id",
            json={"secret_id": "my-own-secret", "num_uses": 1},
        )
        assert status == 200, body
        assert body["data"]["secret_id"] == "my-own-secret"
        custom_accessor = body["data"]["secret_id_accessor"]
        status, body = await c.request(
            "POST", f"{base}/role/web/custom-secret-id", json={"secret_id": "my-own-secret"}
        )
        assert status == 400
        assert (await _login(c, base, "web-role-id", "my-own-secret"))[0] == 200
        assert await _login(c, base, "web-role-id", "my-own-secret") == (
            400,
            {"errors": INVALID},
        )  # its single use is spent
        status, _ = await c.request(
            "POST",
            f"{base}/role/web/secret-id-accessor/lookup",
            json={"secret_id_accessor": custom_accessor},
        )
        assert status == 404

        # Destroy by secret id and by accessor.
        other = await _secret(c, base, "web")
        status, _ = await c.request(
            "POST", f"{base}/role/web/secret-id/destroy", json={"secret_id": secret["secret_id"]}
        )
        assert status == 204
        assert (await _login(c, base, "web-role-id", secret["secret_id"]))[0] == 400
        status, body = await c.request(
            "POST", f"{base}/role/web/secret-id/lookup", json={"secret_id": secret["secret_id"]}
        )
        assert status == 204
        status, _ = await c.request(
            "POST",
            f"{base}/role/web/secret-id-accessor/destroy",
            json={"secret_id_accessor": other["secret_id_accessor"]},
        )
        assert status == 204
        assert (await _login(c, base, "web-role-id", other["secret_id"]))[0] == 400
        status, _ = await c.request("LIST", f"{base}/role/web/secret-id")
        assert status == 404

        # Deleting the role removes its secret ids and role id; a new role of the same name
        # does not inherit them.
        last = await _secret(c, base, "web")
        status, _ = await c.request("DELETE", f"{base}/role/web")
        assert status == 204
        status, _ = await c.request("GET", f"{base}/role/web")
        assert status == 404
        status, _ = await c.request("LIST", f"{base}/role")
        assert status == 404
        assert (await _login(c, base, "web-role-id", last["secret_id"]))[0] == 400
        status, body = await c.request("POST", f"{base}/role/web", json={"role_id": "web-role-id"})
        assert status == 204, body
        assert (await _login(c, base, "web-role-id", last["secret_id"]))[0] == 400

        # Neither secret ids nor role ids appear in storage keys.
        svc = c.secrets[0]
        assert svc.core is not None
        keys = await svc.core.storage.list("")
        joined = "\n".join(keys)
        for secret_text in (last["secret_id"], "my-own-secret", "web-role-id", role_id):
            assert secret_text not in joined
    finally:
        await c.close()


async def test_approle_secret_id_uses_are_counted_under_concurrency(nats_url: str) -> None:
    """A single-use secret id gives exactly one token, however many logins race for it on
    however many replicas."""
    c = await start_cluster(nats_url, replicas=2)
    try:
        base = await _setup(c)
        status, body = await c.request("POST", f"{base}/role/batch", json={"secret_id_num_uses": 1})
        assert status == 204, body
        role_id = await _role_id(c, base, "batch")
        for _ in range(3):
            secret = await _secret(c, base, "batch")
            results = await asyncio.gather(
                *(_login(c, base, role_id, secret["secret_id"]) for _ in range(6))
            )
            statuses = sorted(s for s, _ in results)
            assert statuses == [200] + [400] * 5, results
            assert all(b["errors"] == INVALID for s, b in results if s == 400)

        # Three uses: three logins, then refused.
        secret = await _secret(c, base, "batch", num_uses=1)
        status, body = await c.request("POST", f"{base}/role/batch", json={"secret_id_num_uses": 3})
        assert status == 204, body
        secret = await _secret(c, base, "batch")
        assert secret["secret_id_num_uses"] == 3
        results = await asyncio.gather(
            *(_login(c, base, role_id, secret["secret_id"]) for _ in range(5))
        )
        assert sorted(s for s, _ in results) == [200, 200, 200, 400, 400]
    finally:
        await c.close()


async def test_approle_expiry_cidrs_and_constraints(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        base = await _setup(c)
        # An expiring secret id: refused once its TTL has passed (polled with a deadline).
        status, body = await c.request("POST", f"{base}/role/short", json={"secret_id_ttl": "1s"})
        assert status == 204, body
        role_id = await _role_id(c, base, "short")
        secret = await _secret(c, base, "short")
        assert secret["secret_id_ttl"] == 1
        deadline = asyncio.get_running_loop().time() + 10
        while True:
            status, body = await c.request(
                "POST",
                f"{base}/role/short/secret-id/lookup",
                json={"secret_id": secret["secret_id"]},
            )
            if status != 200:
                break
            assert asyncio.get_running_loop().time() < deadline, "secret id never expired"
            await asyncio.sleep(0.2)
        assert await _login(c, base, role_id, secret["secret_id"]) == (400, {"errors": INVALID})

        # No secret id, bound to the caller's address instead.
        status, body = await c.request(
            "POST",
            f"{base}/role/open",
            json={"bind_secret_id": False, "secret_id_bound_cidrs": "127.0.0.0/8"},
        )
        assert status == 204, body
        open_id = await _role_id(c, base, "open")
        status, body = await _login(c, base, open_id, None)
        assert status == 200, body
        status, body = await c.request("POST", f"{base}/role/open/secret-id")
        assert status == 400  # nothing to issue without bind_secret_id
        status, body = await c.request(
            "POST",
            f"{base}/role/far",
            json={"bind_secret_id": False, "secret_id_bound_cidrs": ["10.0.0.0/8"]},
        )
        assert status == 204, body
        status, body = await _login(c, base, await _role_id(c, base, "far"), None)
        assert status == 400

        # Token CIDRs are checked at login; a secret id's own CIDRs too.
        status, body = await c.request(
            "POST", f"{base}/role/tok", json={"token_bound_cidrs": "10.0.0.0/8"}
        )
        assert status == 204, body
        tok_secret = await _secret(c, base, "tok")
        status, _ = await _login(c, base, await _role_id(c, base, "tok"), tok_secret["secret_id"])
        assert status == 403
        status, body = await c.request(
            "POST", f"{base}/role/cidr", json={"secret_id_bound_cidrs": "127.0.0.0/8"}
        )
        assert status == 204, body
        status, body = await c.request(
            "POST", f"{base}/role/cidr/secret-id", json={"cidr_list": "10.0.0.0/8"}
        )
        assert status == 400  # outside the role's blocks
        narrow = await _secret(c, base, "cidr", cidr_list="127.0.0.1/32")
        status, body = await _login(c, base, await _role_id(c, base, "cidr"), narrow["secret_id"])
        assert status == 200, body

        # Per-field endpoints.
        status, body = await c.request(
            "POST", f"{base}/role/short/secret-id-num-uses", json={"secret_id_num_uses": 7}
        )
        assert status == 204, body
        status, body = await c.request("GET", f"{base}/role/short/secret-id-num-uses")
        assert body["data"] == {"secret_id_num_uses": 7}
        status, body = await c.request(
            "POST", f"{base}/role/short/policies", json={"policies": "a,b"}
        )
        assert status == 204, body
        status, body = await c.request("GET", f"{base}/role/short/policies")
        assert body["data"] == {"token_policies": ["a", "b"], "policies": ["a", "b"]}
        status, _ = await c.request("DELETE", f"{base}/role/short/policies")
        assert status == 204
        status, body = await c.request("GET", f"{base}/role/short")
        assert body["data"]["token_policies"] == [] and "policies" not in body["data"]
        status, body = await c.request("GET", f"{base}/role/short/local-secret-ids")
        assert body["data"] == {"local_secret_ids": False}
        status, _ = await c.request("POST", f"{base}/role/ghost/token-ttl", json={"token_ttl": 5})
        assert status == 404

        # Tidy removes expired secret ids.
        status, body = await c.request("POST", f"{base}/tidy/secret-id")
        assert status == 200 and body["warnings"]
    finally:
        await c.close()


async def test_approle_bad_input_is_4xx(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        base = await _setup(c)
        status, body = await c.request(
            "POST",
            f"{base}/role/r",
            json={
                "secret_id_ttl": "1h",
                "secret_id_num_uses": 2,
                "secret_id_bound_cidrs": "127.0.0.0/8",
            },
        )
        assert status == 204, body
        cases: list[tuple[str, str, Any, int]] = [
            ("POST", "role/x", {"bind_secret_id": False}, 400),  # no constraint left
            ("POST", "role/x", {"secret_id_num_uses": -1}, 400),
            ("POST", "role/x", {"secret_id_ttl": "-5s"}, 400),
            ("POST", "role/x", {"secret_id_ttl": "later"}, 400),
            ("POST", "role/x", {"secret_id_bound_cidrs": "300.0.0.0/8"}, 400),
            ("POST", "role/x", {"token_type": "batchy"}, 400),
            ("POST", "role/x", {"token_ttl": "2h", "token_max_ttl": "1h"}, 400),
            ("POST", "role/x", {"policies": "a", "token_policies": "b"}, 400),
            ("POST", "role/x", {"role_id": ""}, 400),
            ("POST", "role/bad$name", {}, 400),
            ("POST", "role/" + "a" * 300, {}, 400),  # names become storage keys
            ("POST", "role/%20%20", {}, 400),
            ("POST", "role/r", {"local_secret_ids": True}, 400),  # create-time only
            ("POST", "role/r/secret-id", {"num_uses": 3}, 400),  # above the role's 2
            ("POST", "role/r/secret-id", {"num_uses": -1}, 400),
            ("POST", "role/r/secret-id", {"ttl": "2h"}, 400),  # above the role's 1h
            ("POST", "role/r/secret-id", {"metadata": "{not json"}, 400),
            ("POST", "role/r/secret-id", {"metadata": {"n": 1}}, 400),
            ("POST", "role/r/secret-id", {"cidr_list": "bogus"}, 400),
            ("POST", "role/r/custom-secret-id", {}, 400),
            ("POST", "role/ghost/secret-id", {}, 400),
            ("LIST", "role/ghost/secret-id", None, 400),
            ("POST", "role/r/secret-id/lookup", {}, 400),
            ("POST", "role/r/secret-id/lookup", {"secret_id": "unknown"}, 204),
            ("POST", "role/r/secret-id/destroy", {"secret_id": "unknown"}, 204),
            ("POST", "role/r/secret-id-accessor/lookup", {"secret_id_accessor": "zz"}, 404),
            ("POST", "role/r/secret-id-accessor/destroy", {"secret_id_accessor": "zz"}, 400),
            ("POST", "role/r/secret-id-accessor/lookup", {}, 400),
            ("POST", "role/r/role-id", {"role_id": " "}, 400),
            ("POST", "role/ghost/role-id", {"role_id": "abc"}, 404),
            ("GET", "role/ghost/role-id", None, 404),
            ("GET", "role/ghost", None, 404),
            ("DELETE", "role/ghost", None, 204),
            ("POST", "login", {"role_id": ["x"]}, 400),
        ]
        for method, path, payload, want in cases:
            status, body = await c.request(method, f"{base}/{path}", json=payload)
            assert status == want, (method, path, payload, status, body)
        status, _ = await c.request("GET", f"{base}/role/x")
        assert status == 404
        # Login needs no token; management does.
        status, _ = await c.request("POST", f"{base}/role/r/secret-id", token="")
        assert status == 403
        status, body = await c.request("GET", "/v1/sys/internal/specs/openapi")
        assert status == 200, body
    finally:
        await c.close()


async def test_approle_with_hvac(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        client = hvac.Client(url=c.secrets_url, token=c.root_token)
        await asyncio.to_thread(client.sys.enable_auth_method, "approle")
        await asyncio.to_thread(client.sys.create_or_update_acl_policy, "reader", READER)
        await asyncio.to_thread(
            client.auth.approle.create_or_update_approle,
            "app",
            token_policies=["reader"],
            token_ttl="10m",
            secret_id_num_uses=2,
            enable_local_secret_ids=False,
        )
        roles = await asyncio.to_thread(client.auth.approle.list_roles)
        assert roles["data"]["keys"] == ["app"]
        role = await asyncio.to_thread(client.auth.approle.read_role, "app")
        assert role["data"]["token_policies"] == ["reader"]
        role_id = (await asyncio.to_thread(client.auth.approle.read_role_id, "app"))["data"][
            "role_id"
        ]
        generated = await asyncio.to_thread(
            client.auth.approle.generate_secret_id, "app", metadata={"env": "test"}
        )
        secret_id = generated["data"]["secret_id"]
        accessors = await asyncio.to_thread(client.auth.approle.list_secret_id_accessors, "app")
        assert accessors["data"]["keys"] == [generated["data"]["secret_id_accessor"]]
        info = await asyncio.to_thread(client.auth.approle.read_secret_id, "app", secret_id)
        assert info["data"]["metadata"] == {"env": "test"}

        app = hvac.Client(url=c.secrets_url)
        resp = await asyncio.to_thread(app.auth.approle.login, role_id, secret_id)
        assert resp["auth"]["policies"] == ["default", "reader"]
        assert resp["auth"]["lease_duration"] == 600
        assert app.token == resp["auth"]["client_token"]
        policy = await asyncio.to_thread(app.sys.read_acl_policy, "reader")
        assert "sys/policies/acl" in policy["data"]["policy"]
        with pytest.raises(hvac.exceptions.Forbidden):
            await asyncio.to_thread(app.sys.list_mounted_secrets_engines)

        await asyncio.to_thread(client.auth.approle.update_role_id, "app", "custom-id")
        custom = await asyncio.to_thread(
            client.auth.approle.create_custom_secret_id, "app", "custom-secret"
        )
        assert custom["data"]["secret_id"] == "custom-secret"
        resp = await asyncio.to_thread(
            hvac.Client(url=c.secrets_url).auth.approle.login, "custom-id", "custom-secret"
        )
        assert resp["auth"]["client_token"]
        await asyncio.to_thread(
            client.auth.approle.destroy_secret_id_accessor,
            "app",
            custom["data"]["secret_id_accessor"],
        )
        with pytest.raises(hvac.exceptions.InvalidRequest):
            await asyncio.to_thread(
                hvac.Client(url=c.secrets_url).auth.approle.login, "custom-id", "custom-secret"
            )
        await asyncio.to_thread(client.auth.approle.delete_role, "app")
        with pytest.raises(hvac.exceptions.InvalidRequest):
            await asyncio.to_thread(
                hvac.Client(url=c.secrets_url).auth.approle.login, "custom-id", secret_id
            )
    finally:
        await c.close()
