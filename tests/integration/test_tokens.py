"""The token auth method end to end through the gateway: create, lookup, renew, revoke (with the
parent/child tree), use limits, expiry, both token headers, and hvac unmodified."""

from __future__ import annotations

import asyncio
from typing import Any

import hvac
import pytest

from tests.harness import Cluster, start_cluster

pytestmark = pytest.mark.nats

# What a delegated token manager gets: create, look up, renew and revoke tokens, with sudo.
TOKENMGR = 'path "auth/token/*" { capabilities = ["create", "read", "update", "sudo"] }\n'
READER = 'path "sys/policies/acl/*" { capabilities = ["read"] }\n'
# May create child tokens, without sudo.
CREATOR = 'path "auth/token/create" { capabilities = ["create", "update"] }\n'


async def _policies(c: Cluster) -> None:
    for name, text in (("tokenmgr", TOKENMGR), ("reader", READER), ("creator", CREATOR)):
        status, body = await c.request("PUT", f"/v1/sys/policies/acl/{name}", json={"policy": text})
        assert status in (200, 204), body


async def _create(
    c: Cluster, token: str | None = None, path: str = "create", **payload: Any
) -> dict[str, Any]:
    status, body = await c.request("POST", f"/v1/auth/token/{path}", token=token, json=payload)
    assert status == 200, (path, payload, body)
    return body["auth"]


async def _self(c: Cluster, token: str) -> tuple[int, Any]:
    return await c.request("GET", "/v1/auth/token/lookup-self", token=token)


async def _lookup(c: Cluster, token: str) -> tuple[int, Any]:
    """Root looks a token up."""
    return await c.request("POST", "/v1/auth/token/lookup", json={"token": token})


async def _gone(c: Cluster, token: str) -> bool:
    status, _ = await _self(c, token)
    return status == 403


async def test_token_create_variants(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        await _policies(c)
        # A child of root.
        child = await _create(
            c, policies=["reader"], ttl="1h", meta={"app": "web"}, display_name="Web App"
        )
        assert child["policies"] == ["default", "reader"]
        assert child["token_policies"] == ["default", "reader"]
        assert child["lease_duration"] == 3600 and child["renewable"] is True
        assert child["orphan"] is False and child["client_token"].startswith("hvs.")
        assert child["metadata"] == {"app": "web"} and child["token_type"] == "service"
        status, body = await _self(c, child["client_token"])
        assert status == 200, body
        d = body["data"]
        assert d["id"] == child["client_token"] and d["accessor"] == child["accessor"]
        assert d["path"] == "auth/token/create" and d["display_name"] == "token-web-app"
        assert d["meta"] == {"app": "web"} and d["creation_ttl"] == 3600
        assert 3590 <= d["ttl"] <= 3600 and d["expire_time"] and d["issue_time"]
        assert d["orphan"] is False and d["num_uses"] == 0 and d["explicit_max_ttl"] == 0

        # Orphans: create-orphan, and no_parent (root only).
        orphan = await _create(c, path="create-orphan", policies=["reader"])
        assert orphan["orphan"] is True
        status, body = await _self(c, orphan["client_token"])
        assert body["data"]["orphan"] is True
        no_parent = await _create(c, policies=["reader"], no_parent=True)
        assert no_parent["orphan"] is True

        # A chosen id (root only).
        custom = await _create(c, id="my-custom-token", policies=["reader"])
        assert custom["client_token"] == "my-custom-token"
        status, body = await _self(c, "my-custom-token")
        assert status == 200 and body["data"]["id"] == "my-custom-token"
        status, body = await c.request(
            "POST", "/v1/auth/token/create", json={"id": "my-custom-token"}
        )
        assert status == 400, body

        # Policies of a non-root parent bound its children.
        mgr = await _create(c, policies=["tokenmgr", "reader"])
        mtok = mgr["client_token"]
        sub = await _create(c, mtok, policies=["reader"])
        assert sub["policies"] == ["default", "reader"]
        inherited = await _create(c, mtok)
        assert inherited["policies"] == ["default", "reader", "tokenmgr"]
        for bad in ({"policies": ["admin"]}, {"policies": ["root"]}):
            status, body = await c.request("POST", "/v1/auth/token/create", token=mtok, json=bad)
            assert status == 400, (bad, body)
        status, _ = await c.request(
            "POST", "/v1/auth/token/create", token=sub["client_token"], json={}
        )
        assert status == 403  # reader has no access to auth/token/create at all

        # no_default_policy, TTL knobs and use counts.
        nodef = await _create(c, policies=["reader"], no_default_policy=True)
        assert nodef["policies"] == ["reader"]
        capped = await _create(c, policies=["reader"], ttl="1h", explicit_max_ttl="30m")
        assert capped["lease_duration"] == 1800
        status, body = await _self(c, capped["client_token"])
        assert body["data"]["explicit_max_ttl"] == 1800
        periodic = await _create(c, policies=["reader"], period="15m")
        assert periodic["lease_duration"] == 900
        status, body = await _self(c, periodic["client_token"])
        assert body["data"]["period"] == 900
        limited = await _create(c, policies=["reader"], num_uses=3)
        assert limited["num_uses"] == 3
        default_ttl = await _create(c, policies=["reader"])
        assert default_ttl["lease_duration"] == 2764800  # 32 days, the system default
        unrenewable = await _create(c, policies=["reader"], renewable=False)
        assert unrenewable["renewable"] is False
    finally:
        await c.close()


async def test_token_create_needs_sudo_for_id_orphan_and_period(nats_url: str) -> None:
    """Vault: a chosen id, no_parent and period each need root or sudo on the path."""
    c = await start_cluster(nats_url)
    try:
        await _policies(c)
        mtok = (await _create(c, policies=["tokenmgr", "reader"]))["client_token"]
        # Without sudo: no chosen id, no orphan, no periodic token (Vault's rules).
        creator = (await _create(c, policies=["creator", "reader"]))["client_token"]
        assert (await _create(c, creator, policies=["reader"]))["orphan"] is False
        for bad in ({"id": "chosen"}, {"no_parent": True}, {"period": "1h"}):
            status, body = await c.request(
                "POST", "/v1/auth/token/create", token=creator, json={"policies": ["reader"], **bad}
            )
            assert status == 400, (bad, body)
        # With sudo on the path they are allowed.
        for good in ({"id": "chosen-by-sudo"}, {"no_parent": True}, {"period": "1h"}):
            status, body = await c.request(
                "POST", "/v1/auth/token/create", token=mtok, json={"policies": ["reader"], **good}
            )
            assert status == 200, (good, body)
    finally:
        await c.close()


async def test_token_lookup_and_renew(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        await _policies(c)
        tok = await _create(c, policies=["reader"], ttl="10m", explicit_max_ttl="1h")
        t = tok["client_token"]

        status, body = await _lookup(c, t)
        assert status == 200 and body["data"]["id"] == t
        status, body = await c.request(
            "POST", "/v1/auth/token/lookup-accessor", json={"accessor": tok["accessor"]}
        )
        assert status == 200, body
        assert body["data"]["id"] == "" and body["data"]["accessor"] == tok["accessor"]
        assert body["data"]["policies"] == ["default", "reader"]

        # renew-self: the increment counts from now, capped by explicit_max_ttl.
        status, body = await c.request(
            "POST", "/v1/auth/token/renew-self", token=t, json={"increment": "30m"}
        )
        assert status == 200, body
        assert 1790 <= body["auth"]["lease_duration"] <= 1800
        assert body["auth"]["client_token"] == t
        status, body = await c.request(
            "POST", "/v1/auth/token/renew-self", token=t, json={"increment": "5h"}
        )
        assert status == 200 and 3500 <= body["auth"]["lease_duration"] <= 3600
        status, body = await _self(c, t)
        assert 3500 <= body["data"]["ttl"] <= 3600

        # renew (by token) and renew-accessor, by root.
        other = await _create(c, policies=["reader"], ttl="10m")
        status, body = await c.request(
            "POST", "/v1/auth/token/renew", json={"token": other["client_token"], "increment": 1200}
        )
        assert status == 200 and 1190 <= body["auth"]["lease_duration"] <= 1200
        status, body = await c.request(
            "POST",
            "/v1/auth/token/renew-accessor",
            json={"accessor": other["accessor"], "increment": "40m"},
        )
        assert status == 200 and 2390 <= body["auth"]["lease_duration"] <= 2400

        # A periodic token renews to its period, whatever the increment.
        periodic = await _create(c, policies=["reader"], period="15m")
        status, body = await c.request(
            "POST",
            "/v1/auth/token/renew-self",
            token=periodic["client_token"],
            json={"increment": "3h"},
        )
        assert status == 200 and 899 <= body["auth"]["lease_duration"] <= 900

        # A token created non-renewable cannot be renewed.
        fixed = await _create(c, policies=["reader"], renewable=False, ttl="10m")
        status, body = await c.request(
            "POST", "/v1/auth/token/renew-self", token=fixed["client_token"]
        )
        assert status == 400, body

        # Unknown accessors and tokens.
        status, _ = await c.request(
            "POST", "/v1/auth/token/lookup-accessor", json={"accessor": "nope"}
        )
        assert status == 400
        status, _ = await c.request(
            "POST", "/v1/auth/token/renew", json={"token": "hvs.doesnotexist"}
        )
        assert status == 400
    finally:
        await c.close()


async def test_token_lookup_answers_like_vault(nats_url: str) -> None:
    """creation_ttl stays the TTL the token was created with after renewals, a renewal reports
    the TTL it granted, and looking up an unknown token is 403 "bad token" (Vault's token
    store answers ErrPermissionDenied)."""
    c = await start_cluster(nats_url)
    try:
        await _policies(c)
        tok = await _create(c, policies=["reader"], ttl="10m")
        status, body = await c.request(
            "POST", "/v1/auth/token/renew-self", token=tok["client_token"], json={"increment": "1h"}
        )
        assert status == 200, body
        status, body = await _self(c, tok["client_token"])
        assert 3500 <= body["data"]["ttl"] <= 3600
        assert body["data"]["creation_ttl"] == 600
        # Renewing a periodic token grants exactly its period (not a second less).
        periodic = await _create(c, policies=["reader"], period="15m")
        status, body = await c.request(
            "POST", "/v1/auth/token/renew-self", token=periodic["client_token"]
        )
        assert status == 200 and body["auth"]["lease_duration"] == 900
        status, body = await _lookup(c, "hvs.doesnotexist")
        assert status == 403 and body["errors"] == ["bad token"]
    finally:
        await c.close()


async def test_token_revocation_tree(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        await _policies(c)
        parent = await _create(c, policies=["tokenmgr"])
        p = parent["client_token"]
        child = await _create(c, p)
        grandchild = await _create(c, child["client_token"])
        orphan = await _create(c, p, path="create-orphan")
        assert orphan["orphan"] is True and child["orphan"] is False

        # revoke: the token and its descendants go; an orphan it made survives.
        status, _ = await c.request("POST", "/v1/auth/token/revoke", json={"token": p})
        assert status == 204
        for gone in (p, child["client_token"], grandchild["client_token"]):
            assert await _gone(c, gone)
            assert (await _lookup(c, gone))[0] in (400, 403)
        status, body = await _self(c, orphan["client_token"])
        assert status == 200 and body["data"]["orphan"] is True

        # revoke-orphan: the token goes, its children stay and become orphans.
        parent2 = await _create(c, policies=["tokenmgr"])
        child2 = await _create(c, parent2["client_token"])
        status, _ = await c.request(
            "POST", "/v1/auth/token/revoke-orphan", json={"token": parent2["client_token"]}
        )
        assert status == 204
        assert await _gone(c, parent2["client_token"])
        status, body = await _self(c, child2["client_token"])
        assert status == 200 and body["data"]["orphan"] is True
        # ... and revoking the child later touches nothing else.
        status, _ = await c.request(
            "POST", "/v1/auth/token/revoke-self", token=child2["client_token"]
        )
        assert status == 204
        assert await _gone(c, child2["client_token"])

        # revoke-accessor also takes the children.
        parent3 = await _create(c, policies=["tokenmgr"])
        child3 = await _create(c, parent3["client_token"])
        status, _ = await c.request(
            "POST", "/v1/auth/token/revoke-accessor", json={"accessor": parent3["accessor"]}
        )
        assert status == 204
        assert await _gone(c, parent3["client_token"])
        assert await _gone(c, child3["client_token"])
        status, _ = await c.request(
            "POST", "/v1/auth/token/lookup-accessor", json={"accessor": parent3["accessor"]}
        )
        assert status == 400

        # revoke-self with children.
        parent4 = await _create(c, policies=["tokenmgr"])
        child4 = await _create(c, parent4["client_token"])
        status, _ = await c.request(
            "POST", "/v1/auth/token/revoke-self", token=parent4["client_token"]
        )
        assert status == 204
        assert await _gone(c, parent4["client_token"])
        assert await _gone(c, child4["client_token"])

        # revoke-orphan needs sudo (or root); revoking an unknown token is not an error.
        plain = await _create(c, policies=["reader"])
        victim = await _create(c, policies=["reader"])
        status, _ = await c.request(
            "POST",
            "/v1/auth/token/revoke-orphan",
            token=plain["client_token"],
            json={"token": victim["client_token"]},
        )
        assert status == 403
        assert not await _gone(c, victim["client_token"])
        status, _ = await c.request(
            "POST", "/v1/auth/token/revoke", json={"token": "hvs.doesnotexist"}
        )
        assert status == 204

        # Listing accessors needs sudo.
        status, body = await c.request("LIST", "/v1/auth/token/accessors")
        assert status == 200 and orphan["accessor"] in body["data"]["keys"]
        assert parent["accessor"] not in body["data"]["keys"]
        status, _ = await c.request("LIST", "/v1/auth/token/accessors", token=plain["client_token"])
        assert status == 403
    finally:
        await c.close()


async def test_token_use_limits(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        await _policies(c)
        tok = await _create(c, policies=["reader"], num_uses=2)
        t = tok["client_token"]
        status, body = await _self(c, t)
        assert status == 200 and body["data"]["num_uses"] == 1  # this lookup was a use
        status, _ = await c.request("GET", "/v1/sys/policies/acl/reader", token=t)
        assert status == 200
        status, _ = await _self(c, t)
        assert status == 403  # spent
        status, _ = await _lookup(c, t)
        assert status in (400, 403)  # and revoked

        # A denied request does not use the token up.
        tok = await _create(c, policies=["reader"], num_uses=1)
        status, _ = await c.request("GET", "/v1/sys/mounts", token=tok["client_token"])
        assert status == 403
        status, _ = await _self(c, tok["client_token"])
        assert status == 200
        assert await _gone(c, tok["client_token"])
    finally:
        await c.close()


async def test_token_use_limit_holds_under_concurrency(nats_url: str) -> None:
    """num_uses=1 allows one request, however many race for it."""
    c = await start_cluster(nats_url)
    try:
        await _policies(c)
        for _ in range(3):
            tok = await _create(c, policies=["reader"], num_uses=1)
            results = await asyncio.gather(*(_self(c, tok["client_token"]) for _ in range(6)))
            statuses = sorted(s for s, _ in results)
            assert statuses == [200] + [403] * 5, statuses
    finally:
        await c.close()


async def test_token_expiry_refuses_expired_tokens(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        await _policies(c)
        short = await _create(c, policies=["reader"], ttl="2s")
        status, body = await _self(c, short["client_token"])
        assert status == 200 and body["data"]["ttl"] <= 2
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while not await _gone(c, short["client_token"]):
            assert loop.time() < deadline, "token with ttl 2s still valid"
            await asyncio.sleep(0.2)
        status, _ = await _lookup(c, short["client_token"])
        assert status in (400, 403)
        status, _ = await c.request(
            "GET", "/v1/sys/policies/acl/reader", token=short["client_token"]
        )
        assert status == 403
    finally:
        await c.close()


async def test_token_expiry_sweep_revokes_children(nats_url: str) -> None:
    """The expiry manager revokes an expired token and its children without anybody using
    the expired token (children of a parent past its TTL must not stay valid)."""
    c = await start_cluster(nats_url)
    try:
        await _policies(c)
        # A few pairs created a moment apart, so their expiry falls at different points of
        # the sweep's cycle.
        children = []
        for _ in range(3):
            parent = await _create(c, policies=["tokenmgr"], ttl="2s")
            children.append((await _create(c, parent["client_token"], ttl="1h"))["client_token"])
            await asyncio.sleep(0.3)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        for child in children:
            while not await _gone(c, child):  # never touch the parents
                assert loop.time() < deadline, "child of an expired token still valid"
                await asyncio.sleep(0.2)
    finally:
        await c.close()


async def test_token_headers(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        await _policies(c)
        t = (await _create(c, policies=["reader"]))["client_token"]
        for headers in (
            {"Authorization": f"Bearer {t}"},
            {"authorization": f"bearer {t}"},
            {"X-Vault-Token": t},
            {"X-Svc-Token": t},
        ):
            status, body = await c.request(
                "GET", "/v1/auth/token/lookup-self", token="", headers=headers
            )
            assert status == 200 and body["data"]["id"] == t, headers
        status, _ = await c.request("GET", "/v1/auth/token/lookup-self", token="")
        assert status == 403
        status, _ = await c.request(
            "GET", "/v1/auth/token/lookup-self", token="", headers={"Authorization": "Basic abc"}
        )
        assert status == 403
        status, _ = await c.request(
            "GET", "/v1/auth/token/lookup-self", token="", headers={"X-Vault-Token": "hvs.forged"}
        )
        assert status == 403
    finally:
        await c.close()


async def test_token_bad_input_is_4xx(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        await _policies(c)
        cases: list[tuple[dict[str, Any], int]] = [
            ({"ttl": "soon"}, 400),
            ({"num_uses": -1}, 400),
            ({"num_uses": "many"}, 400),
            ({"type": "batch"}, 400),
            ({"id": "has.dot"}, 400),
            ({"policies": {"a": 1}}, 400),
            ({"meta": "not-an-object"}, 400),
            ({"renewable": "perhaps"}, 400),
            ({"explicit_max_ttl": [1]}, 400),
        ]
        for payload, want in cases:
            status, body = await c.request("POST", "/v1/auth/token/create", json=payload)
            assert status == want, (payload, status, body)
        status, _ = await c.request("POST", "/v1/auth/token/create/no-such-role", json={})
        assert status == 400
        status, _ = await c.request("GET", "/v1/auth/token/create")
        assert status == 405
        status, _ = await c.request("POST", "/v1/auth/token/nope", json={})
        assert status == 404
    finally:
        await c.close()


async def test_token_roles(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        await _policies(c)
        status, body = await c.request(
            "POST",
            "/v1/auth/token/roles/ci",
            json={
                "allowed_policies": "reader",
                "orphan": True,
                "token_ttl": "5m",
                "token_period": 0,
            },
        )
        assert status == 204, body
        status, body = await c.request("GET", "/v1/auth/token/roles/ci")
        assert status == 200 and body["data"]["name"] == "ci"
        status, body = await c.request("LIST", "/v1/auth/token/roles")
        assert status == 200 and body["data"]["keys"] == ["ci"]
        tok = await _create(c, path="create/ci")
        assert tok["policies"] == ["default", "reader"] and tok["orphan"] is True
        assert tok["lease_duration"] == 300
        status, body = await c.request(
            "POST", "/v1/auth/token/create/ci", json={"policies": ["tokenmgr"]}
        )
        assert status == 400, body
        status, _ = await c.request("DELETE", "/v1/auth/token/roles/ci")
        assert status == 204
        status, _ = await c.request("LIST", "/v1/auth/token/roles")
        assert status == 404
    finally:
        await c.close()


async def test_token_role_bound_cidrs_bind_its_tokens(nats_url: str) -> None:
    """As Vault: a role's token_bound_cidrs restrict where each token made through it works
    (this test's requests come from 127.0.0.1)."""
    c = await start_cluster(nats_url)
    try:
        status, body = await c.request(
            "POST", "/v1/auth/token/roles/far", json={"token_bound_cidrs": "not-a-cidr"}
        )
        assert status == 400 and "token_bound_cidrs" in str(body), body
        for role, cidrs in (("far", "10.0.0.0/8"), ("near", "127.0.0.1/32,10.0.0.0/8")):
            status, body = await c.request(
                "POST", f"/v1/auth/token/roles/{role}", json={"token_bound_cidrs": cidrs}
            )
            assert status == 204, body
        far = await _create(c, path="create/far")
        near = await _create(c, path="create/near")
        assert (await _self(c, far["client_token"]))[0] == 403
        status, body = await _self(c, near["client_token"])
        assert status == 200, body
        # The binding is the token's own: unaffected by a later change of the role.
        status, _ = await c.request(
            "POST", "/v1/auth/token/roles/far", json={"token_bound_cidrs": "127.0.0.0/8"}
        )
        assert status == 204
        assert (await _self(c, far["client_token"]))[0] == 403
    finally:
        await c.close()


async def test_token_with_hvac(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        root = hvac.Client(url=c.secrets_url, token=c.root_token)
        await asyncio.to_thread(root.sys.create_or_update_acl_policy, "reader", READER)
        created = await asyncio.to_thread(
            root.auth.token.create,
            policies=["reader"],
            ttl="1h",
            explicit_max_ttl="2h",
            meta={"k": "v"},
        )
        tok = created["auth"]["client_token"]
        assert created["auth"]["policies"] == ["default", "reader"]

        client = hvac.Client(url=c.secrets_url, token=tok)
        assert await asyncio.to_thread(client.is_authenticated)
        me = await asyncio.to_thread(client.auth.token.lookup_self)
        assert me["data"]["id"] == tok and me["data"]["meta"] == {"k": "v"}
        assert me["data"]["display_name"] == "token-token"  # hvac's default display name
        renewed = await asyncio.to_thread(client.auth.token.renew_self, increment="90m")
        assert 5390 <= renewed["auth"]["lease_duration"] <= 5400
        looked = await asyncio.to_thread(root.auth.token.lookup, tok)
        assert looked["data"]["id"] == tok
        by_accessor = await asyncio.to_thread(
            root.auth.token.lookup_accessor, created["auth"]["accessor"]
        )
        assert by_accessor["data"]["accessor"] == created["auth"]["accessor"]
        orphan = await asyncio.to_thread(root.auth.token.create_orphan, policies=["reader"])
        assert orphan["auth"]["orphan"] is True

        await asyncio.to_thread(client.auth.token.revoke_self)
        assert not await asyncio.to_thread(client.is_authenticated)
        with pytest.raises(hvac.exceptions.Forbidden):
            await asyncio.to_thread(client.auth.token.lookup_self)
    finally:
        await c.close()


async def test_token_create_warns_of_each_unknown_policy(nats_url: str) -> None:
    """As Vault: the token is made with the policies asked for, and each that does not exist
    is named in a warning; known ones (and `default`) are not."""
    c = await start_cluster(nats_url)
    try:
        await _policies(c)
        status, body = await c.request(
            "POST", "/v1/auth/token/create", json={"policies": ["reader", "ghost-b", "ghost-a"]}
        )
        assert status == 200, body
        assert body["auth"]["policies"] == ["default", "ghost-a", "ghost-b", "reader"]
        assert body["warnings"] == [
            'Policy "ghost-a" does not exist',
            'Policy "ghost-b" does not exist',
        ]
        status, body = await c.request(
            "PUT", "/v1/sys/policies/acl/ghost-a", json={"policy": READER}
        )
        assert status in (200, 204), body
        status, body = await c.request(
            "POST", "/v1/auth/token/create", json={"policies": ["ghost-a"]}
        )
        assert status == 200 and not body.get("warnings"), body
    finally:
        await c.close()
