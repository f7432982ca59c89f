"""The secrets core through the gateway: init and unseal across replicas, seal, mounts, policies,
namespaces, wrapping, help, and the error contract."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from tests.harness import Cluster, start_cluster

pytestmark = pytest.mark.nats


async def _until(pred, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    """Wait for a condition with a deadline (never a bare sleep standing in for it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await pred():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met before the deadline")


async def test_fresh_install_mounts(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        status, body = await c.request("GET", "/v1/sys/seal-status", token="")
        assert status == 200 and body["sealed"] is False and body["initialized"] is True
        assert body["cluster_id"]
        status, body = await c.request("GET", "/v1/sys/mounts")
        assert status == 200, body
        assert set(body["data"]) >= {"sys/", "cubbyhole/"}
        status, body = await c.request("GET", "/v1/sys/auth")
        assert body["data"]["token/"]["type"] == "token"
    finally:
        await c.close()


async def test_shamir_unseal_reaches_every_replica(nats_url: str) -> None:
    c = await start_cluster(nats_url, replicas=2, initialize=False)
    try:
        status, body = await c.request(
            "POST", "/v1/sys/init", token="", json={"secret_shares": 3, "secret_threshold": 2}
        )
        assert status == 200, body
        assert len(body["keys"]) == 3 and all(len(k) == 66 for k in body["keys"])
        c.root_token = body["root_token"]
        c.unseal_keys = body["keys"]
        status, body = await c.request("GET", "/v1/secret/x")
        assert status == 503 and body["errors"]
        status, body = await c.request(
            "POST", "/v1/sys/unseal", json={"key": body and c.root_token[:0] + (await _keys(c))[0]}
        )
        assert status == 200 and body["progress"] == 1 and body["sealed"] is True
        status, body = await c.request("POST", "/v1/sys/unseal", json={"key": (await _keys(c))[1]})
        assert status == 200 and body["sealed"] is False

        async def all_unsealed() -> bool:
            return all(not s.core.sealed for s in c.secrets)  # type: ignore[union-attr]

        await _until(all_unsealed)
        # A replica started later joins the unsealed cluster without a human.
        late = await c.add_secrets_replica()

        async def late_unsealed() -> bool:
            return not late.core.sealed  # type: ignore[union-attr]

        await _until(late_unsealed)
        # Sealing through one replica seals them all.
        status, _ = await c.request("PUT", "/v1/sys/seal")
        assert status == 204

        async def all_sealed() -> bool:
            return all(s.core.barrier.sealed for s in c.secrets)  # type: ignore[union-attr]

        await _until(all_sealed)
        status, body = await c.request("GET", "/v1/sys/mounts")
        assert status == 503 and "sealed" in body["errors"][0]
    finally:
        await c.close()


_KEYS: dict[int, list[str]] = {}


async def _keys(c: Cluster) -> list[str]:
    return _KEYS.setdefault(id(c), c.unseal_keys)


async def test_wrong_unseal_key_resets_progress(nats_url: str) -> None:
    c = await start_cluster(nats_url, initialize=False)
    try:
        status, body = await c.request(
            "POST", "/v1/sys/init", token="", json={"secret_shares": 2, "secret_threshold": 2}
        )
        keys = body["keys"]
        bad = keys[0][:-2] + ("00" if keys[0][-2:] != "00" else "01")
        status, body = await c.request("POST", "/v1/sys/unseal", token="", json={"key": keys[0]})
        assert body["progress"] == 1
        status, body = await c.request("POST", "/v1/sys/unseal", token="", json={"key": bad})
        assert status == 400 and "progress was reset" in body["errors"][0]
        status, body = await c.request("GET", "/v1/sys/seal-status", token="")
        assert body["progress"] == 0 and body["sealed"] is True
        status, body = await c.request("POST", "/v1/sys/unseal", token="", json={})
        assert status == 400 and "'key' must be specified" in body["errors"][0]
        status, body = await c.request("POST", "/v1/sys/unseal", token="", json={"key": "zz!"})
        assert status == 400
        status, body = await c.request(
            "POST", "/v1/sys/init", token="", json={"secret_shares": 1, "secret_threshold": 1}
        )
        assert status == 400 and "already initialized" in body["errors"][0]
    finally:
        await c.close()


async def test_policies_and_tokens(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        policy = (
            'path "cubbyhole/*" { capabilities = ["create", "read", "update", "list"] }\n'
            'path "sys/mounts" { capabilities = ["deny"] }'
        )
        status, body = await c.request("PUT", "/v1/sys/policies/acl/cubby", json={"policy": policy})
        assert status == 204, body
        status, body = await c.request("GET", "/v1/sys/policies/acl/cubby")
        assert body["data"]["policy"] == policy
        status, body = await c.request("LIST", "/v1/sys/policies/acl")
        assert {"cubby", "default", "root"} <= set(body["data"]["keys"])
        status, body = await c.request(
            "POST", "/v1/auth/token/create", json={"policies": "cubby", "ttl": "1h"}
        )
        assert status == 200, body
        tok = body["auth"]["client_token"]
        assert body["auth"]["policies"] == ["cubby", "default"]
        assert body["auth"]["lease_duration"] == 3600
        status, _ = await c.request("POST", "/v1/cubbyhole/app", token=tok, json={"pw": "s3cr3t"})
        assert status == 204
        status, body = await c.request("GET", "/v1/cubbyhole/app", token=tok)
        assert body["data"] == {"pw": "s3cr3t"}
        # Another token's cubbyhole is its own.
        status, body = await c.request("GET", "/v1/cubbyhole/app")
        assert status == 404
        status, body = await c.request("GET", "/v1/sys/mounts", token=tok)
        assert status == 403 and body["errors"] == ["permission denied"]
        status, body = await c.request("GET", "/v1/sys/policies/acl/cubby", token=tok)
        assert status == 403
        # Bearer works as well as the header.
        async with (
            aiohttp.ClientSession() as s,
            s.get(
                c.secrets_url + "/v1/auth/token/lookup-self",
                headers={"Authorization": f"Bearer {tok}"},
            ) as r,
        ):
            assert r.status == 200
            assert (await r.json())["data"]["policies"] == ["cubby", "default"]
        status, _ = await c.request("POST", "/v1/auth/token/revoke-self", token=tok)
        assert status == 204
        status, body = await c.request("GET", "/v1/cubbyhole/app", token=tok)
        assert status == 403
        status, body = await c.request("GET", "/v1/sys/mounts", token="hvs.bogus")
        assert status == 403
        status, body = await c.request(
            "PUT",
            "/v1/sys/policies/acl/bad",
            json={"policy": 'path "x" { capabilities = ["fly"] }'},
        )
        assert status == 400 and "fly" in body["errors"][0]
    finally:
        await c.close()


async def test_namespaces_header_and_path_agree(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        status, body = await c.request("POST", "/v1/sys/namespaces/team1")
        assert status == 200 and body["data"]["path"] == "team1/"
        status, _ = await c.request("POST", "/v1/sys/mounts/team1/kvx", json={"type": "cubbyhole"})
        # cubbyhole is not mountable twice, a namespace has its own mount table instead.
        status, body = await c.request("POST", "/v1/team1/cubbyhole/a", json={"v": "1"})
        assert status == 204, body
        status, body = await c.request(
            "GET", "/v1/cubbyhole/a", headers={"X-Vault-Namespace": "team1/"}
        )
        assert status == 200 and body["data"] == {"v": "1"}
        status, body = await c.request("GET", "/v1/cubbyhole/a")
        assert status == 404  # the root namespace's cubbyhole is another one
        status, body = await c.request("LIST", "/v1/sys/namespaces")
        assert body["data"]["keys"] == ["team1/"]
        # A token made inside the namespace cannot reach the root namespace.
        status, body = await c.request(
            "POST", "/v1/team1/auth/token/create", json={"policies": ["default"]}
        )
        ns_tok = body["auth"]["client_token"]
        assert ns_tok.endswith(
            "." + (await c.request("GET", "/v1/sys/namespaces/team1"))[1]["data"]["id"]
        )
        status, _ = await c.request("GET", "/v1/sys/mounts", token=ns_tok)
        assert status == 403
        status, body = await c.request("POST", "/v1/sys/namespaces/team1/inner")
        assert status == 400
        status, body = await c.request("POST", "/v1/sys/namespaces/sys")
        assert status == 400 and "not a valid namespace name" in body["errors"][0]
        status, body = await c.request("DELETE", "/v1/sys/namespaces/team1")
        assert status == 200 and body["data"]["status"] == "deleted"  # as OpenBao: a body
        status, body = await c.request(
            "GET", "/v1/cubbyhole/a", headers={"X-Vault-Namespace": "team1/"}
        )
        assert status == 404
    finally:
        await c.close()


async def test_response_wrapping(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        status, body = await c.request(
            "POST",
            "/v1/sys/wrapping/wrap",
            json={"secret": "value"},
            headers={"X-Vault-Wrap-TTL": "5m"},
        )
        assert status == 200, body
        info = body["wrap_info"]
        assert info["ttl"] == 300 and body["data"] is None
        status, body = await c.request(
            "POST", "/v1/sys/wrapping/lookup", token="", json={"token": info["token"]}
        )
        assert status == 200 and body["data"]["creation_ttl"] == 300
        status, body = await c.request(
            "POST", "/v1/sys/wrapping/rewrap", json={"token": info["token"]}
        )
        new = body["wrap_info"]["token"]
        assert new != info["token"]
        status, body = await c.request("POST", "/v1/sys/wrapping/unwrap", json={"token": new})
        assert status == 200 and body["data"] == {"secret": "value"}
        status, body = await c.request("POST", "/v1/sys/wrapping/unwrap", json={"token": new})
        assert status == 400  # single use
        # Any response can be wrapped: a token creation, unwrapped with the wrapping token.
        status, body = await c.request(
            "POST", "/v1/auth/token/create", json={"ttl": "1h"}, headers={"X-Svc-Wrap-TTL": "60"}
        )
        wrap = body["wrap_info"]["token"]
        assert body["auth"] is None and body["wrap_info"]["wrapped_accessor"]
        status, body = await c.request("POST", "/v1/sys/wrapping/unwrap", token=wrap)
        assert status == 200 and body["auth"]["client_token"].startswith("hvs.")
    finally:
        await c.close()


async def test_help_and_openapi(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        status, body = await c.request("GET", "/v1/sys/mounts?help=1")
        assert status == 200 and "help" in body and body["openapi"]["openapi"].startswith("3")
        assert any(p.startswith("/mounts") for p in body["openapi"]["paths"])
        status, body = await c.request("GET", "/v1/sys/internal/specs/openapi", token="")
        assert status == 200
        paths = body["paths"]
        assert "/sys/mounts/{path}" in paths and "/auth/token/create" in paths
        assert "post" in paths["/sys/policies/acl/{name}"]
        schema = paths["/sys/policies/acl/{name}"]["post"]["requestBody"]["content"][
            "application/json"
        ]["schema"]
        assert "policy" in schema["properties"] and "name" not in schema["properties"]
        status, _ = await c.request("GET", "/v1/sys/mounts?help=1", token="")
        assert status == 403
        # As OpenBao: a mount's root has help, a path no route serves is a 404 (`path-help`).
        status, body = await c.request("GET", "/v1/sys/?help=1")
        assert status == 200 and "help" in body
        for path in ("sys/no-such-path", "auth/token/no-such-path"):
            status, body = await c.request("GET", f"/v1/{path}?help=1")
            assert status == 404 and "unsupported path" in body["errors"][0], (path, body)
    finally:
        await c.close()


async def test_bad_input_gets_documented_errors(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        async with aiohttp.ClientSession() as s:
            hdr = {"X-Vault-Token": c.root_token}
            async with s.post(
                c.secrets_url + "/v1/sys/policies/acl/x", data=b"{not json", headers=hdr
            ) as r:
                assert r.status == 400 and "failed to decode JSON" in (await r.json())["errors"][0]
            async with s.post(
                c.secrets_url + "/v1/sys/policies/acl/x", data=b"[1,2]", headers=hdr
            ) as r:
                assert r.status == 400
            async with s.request("PURGE", c.secrets_url + "/v1/sys/mounts", headers=hdr) as r:
                assert r.status == 405 and (await r.json())["errors"]
            async with s.post(c.secrets_url + "/v1/sys/seal-status", headers=hdr) as r:
                assert r.status == 405
            async with s.get(c.secrets_url + "/v1/nope/thing", headers=hdr) as r:
                assert r.status == 404 and (await r.json())["errors"]
            async with s.get(c.secrets_url + "/v1/sys/policies/acl/name.", headers=hdr) as r:
                assert r.status == 404
            async with s.get(c.secrets_url + "/nope", headers=hdr) as r:
                assert r.status == 404
            big = b"x" * (33 * 1024 * 1024)
            async with s.post(c.secrets_url + "/v1/cubbyhole/big", data=big, headers=hdr) as r:
                assert r.status == 413 and "limit" in (await r.json())["errors"][0]
            # A 30 MB body crosses the bus end to end.
            payload = {"blob": "y" * (30 * 1024 * 1024)}
            async with s.post(
                c.secrets_url + "/v1/cubbyhole/large", json=payload, headers=hdr
            ) as r:
                assert r.status == 204, await r.text()
            async with s.get(c.secrets_url + "/v1/cubbyhole/large", headers=hdr) as r:
                assert len((await r.json())["data"]["blob"]) == 30 * 1024 * 1024
            async with s.post(
                c.secrets_url + "/v1/auth/token/create", json={"ttl": "forever"}, headers=hdr
            ) as r:
                assert r.status == 400 and "ttl" in (await r.json())["errors"][0]
            async with s.post(
                c.secrets_url + "/v1/auth/token/create", json={"num_uses": "many"}, headers=hdr
            ) as r:
                assert r.status == 400
            async with s.get(
                c.secrets_url + "/v1/sys/mounts", headers={"X-Request-Id": "abc123", **hdr}
            ) as r:
                assert r.headers["X-Request-Id"] == "abc123"
                assert (await r.json())["request_id"] == "abc123"
            async with s.get(c.secrets_url + "/v1/sys/health") as r:
                assert r.status == 200 and (await r.json())["sealed"] is False
            async with s.get(c.secrets_url + "/readyz") as r:
                # This cluster runs no crypto worker, which the secrets service relies on:
                # the listener says so (tests/e2e/test_supervision.py covers the ready case).
                ready = await r.json()
                assert r.status == 503 and ready["gateway"] is True, ready
                assert ready["service"]["status"] == 200, ready
                assert [b["name"] for b in ready["service"]["behind"]] == ["crypto"], ready
                assert ready["service"]["behind"][0]["ready"] is False, ready
            async with s.get(c.secrets_url + "/metrics") as r:
                assert "trellis_gateway_requests_total" in await r.text()
    finally:
        await c.close()


async def test_no_replica_is_503_and_health_codes(nats_url: str) -> None:
    c = await start_cluster(nats_url, initialize=False)
    try:
        status, body = await c.request("GET", "/v1/sys/health", token="")
        assert status == 501 and body["initialized"] is False
        for svc in list(c.secrets):
            await c.stop_secrets_replica(svc)
        c.secrets.clear()
        status, body = await c.request("GET", "/v1/sys/health", token="")
        assert status == 503 and "no replica" in body["errors"][0]
        async with aiohttp.ClientSession() as s, s.get(c.workspace_url + "/api/v2/ping") as r:
            assert r.status == 503
            assert r.headers["Content-Type"].startswith("application/vnd.api+json")
    finally:
        await c.close()


async def test_very_long_path_is_a_client_error(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        status, body = await c.request("POST", "/v1/cubbyhole/" + "a/" * 2100, json={"v": 1})
        assert status == 400 and "too long" in body["errors"][0]
        status, _ = await c.request("GET", "/v1/sys/mounts")
        assert status == 200  # the replica is still connected
    finally:
        await c.close()


async def test_lease_listing_takes_a_folder_with_or_without_slash(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        for prefix in ("auth/token", "auth/token/", "nothing-here"):
            status, body = await c.request("LIST", f"/v1/sys/leases/lookup/{prefix}")
            assert status in (200, 404), body
    finally:
        await c.close()
