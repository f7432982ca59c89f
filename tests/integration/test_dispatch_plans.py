"""Plain GETs answered from their plan (services/secrets/core/plans.py) stay exact: a policy
change, a revocation, a renewal, a mount disabled or moved, each is seen by the very next read."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from services.secrets.core.dispatch import handle_http
from shared.messages import HttpRequest
from tests.harness import Cluster, start_cluster

pytestmark = pytest.mark.nats


async def _ok(c: Cluster, method: str, path: str, body: object = None) -> dict:
    status, answer = await c.request(method, path, json=body)
    assert status in (200, 204), (method, path, status, answer)
    return answer


async def _token(c: Cluster, policy: str, text: str) -> str:
    await _ok(c, "PUT", f"/v1/sys/policies/acl/{policy}", {"policy": text})
    created = await _ok(c, "POST", "/v1/auth/token/create", {"policies": [policy], "ttl": "1h"})
    return created["auth"]["client_token"]


async def _read_twice(c: Cluster, path: str, token: str) -> tuple[int, dict]:
    """The first read plans, the second is answered by the plan; both must agree."""
    first = await c.request("GET", path, token=token)
    second = await c.request("GET", path, token=token)
    assert first[0] == second[0], (first, second)
    return second


async def test_plans_follow_policy_token_and_mount_changes(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        mount = f"kvp{uuid.uuid4().hex[:8]}"
        await _ok(c, "POST", f"/v1/sys/mounts/{mount}", {"type": "kv", "options": {"version": "2"}})
        await _ok(c, "POST", f"/v1/{mount}/data/app", {"data": {"v": "1"}})
        policy = f"p{uuid.uuid4().hex[:8]}"
        token = await _token(c, policy, f'path "{mount}/data/*" {{ capabilities = ["read"] }}')
        path = f"/v1/{mount}/data/app"

        status, body = await _read_twice(c, path, token)
        assert status == 200 and body["data"]["data"] == {"v": "1"}
        # A new version is read (the plan holds no data).
        await _ok(c, "POST", path, {"data": {"v": "2"}})
        status, body = await _read_twice(c, path, token)
        assert (status, body["data"]["data"], body["data"]["metadata"]["version"]) == (
            200,
            {"v": "2"},
            2,
        )

        # The policy no longer grants the path: refused at once.
        await _ok(
            c,
            "PUT",
            f"/v1/sys/policies/acl/{policy}",
            {"policy": 'path "other/*" { capabilities = ["read"] }'},
        )
        assert (await c.request("GET", path, token=token))[0] == 403
        # Granted again.
        await _ok(
            c,
            "PUT",
            f"/v1/sys/policies/acl/{policy}",
            {"policy": f'path "{mount}/*" {{ capabilities = ["read"] }}'},
        )
        assert (await _read_twice(c, path, token))[0] == 200

        # The mount moves away: no handler there any more.
        await _ok(c, "POST", "/v1/sys/remount", {"from": mount, "to": mount + "moved"})
        assert (await c.request("GET", path, token=token))[0] == 404
        # A KV v1 mount at the old path: its own answer, not the old backend's.
        await _ok(c, "POST", f"/v1/sys/mounts/{mount}", {"type": "kv", "options": {"version": "1"}})
        await _ok(c, "POST", f"/v1/{mount}/data/app", {"v1": "yes"})
        status, body = await _read_twice(c, path, token)
        assert status == 200 and body["data"] == {"v1": "yes"}

        # The token revoked: refused at once.
        await _ok(c, "POST", "/v1/auth/token/revoke", {"token": token})
        assert (await c.request("GET", path, token=token))[0] == 403
    finally:
        await c.close()


async def test_lookup_self_follows_renewal(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        policy = f"p{uuid.uuid4().hex[:8]}"
        token = await _token(
            c,
            policy,
            'path "auth/token/lookup-self" { capabilities = ["read"] }\n'
            'path "auth/token/renew-self" { capabilities = ["update"] }\n',
        )
        status, before = await _read_twice(c, "/v1/auth/token/lookup-self", token)
        assert status == 200 and before["data"]["id"] == token
        assert 3500 <= before["data"]["ttl"] <= 3600
        status, _ = await c.request(
            "POST", "/v1/auth/token/renew-self", token=token, json={"increment": "5h"}
        )
        assert status == 200
        status, after = await c.request("GET", "/v1/auth/token/lookup-self", token=token)
        assert status == 200
        assert after["data"]["ttl"] > 4 * 3600
        assert after["data"]["expire_time"] != before["data"]["expire_time"]
    finally:
        await c.close()


async def _post_twice(c: Cluster, path: str, token: str, body: dict) -> tuple[int, dict]:
    """The first write plans, the second is answered by the plan; both must agree."""
    first = await c.request("POST", path, token=token, json=body)
    second = await c.request("POST", path, token=token, json=body)
    assert first[0] == second[0], (first, second)
    return second


async def test_write_plans_follow_parameters_existence_policy_mount_and_token(
    nats_url: str,
) -> None:
    c = await start_cluster(nats_url)
    try:
        mount = f"trp{uuid.uuid4().hex[:8]}"
        await _ok(c, "POST", f"/v1/sys/mounts/{mount}", {"type": "transit"})
        await _ok(c, "POST", f"/v1/{mount}/keys/k", {"type": "aes256-gcm96"})
        policy = f"p{uuid.uuid4().hex[:8]}"
        only_plaintext = (
            f'path "{mount}/encrypt/k" {{\n'
            '  capabilities = ["update"]\n'
            '  allowed_parameters = { "plaintext" = [] }\n'
            "}\n"
        )
        token = await _token(c, policy, only_plaintext)
        path = f"/v1/{mount}/encrypt/k"
        plain = {"plaintext": "aGVsbG8="}

        status, body = await _post_twice(c, path, token, plain)
        assert status == 200 and body["data"]["ciphertext"].startswith("vault:v1:")
        # Each planned write is checked against its own parameters.
        refused = await c.request("POST", path, token=token, json={**plain, "context": "eA=="})
        assert refused[0] == 403, refused
        assert (await c.request("POST", path, token=token, json=plain))[0] == 200

        # Create or update is decided per request: with the key gone, the write would create
        # it, which the policy (update only) does not grant.
        await _ok(c, "POST", f"/v1/{mount}/keys/k/config", {"deletion_allowed": True})
        await _ok(c, "DELETE", f"/v1/{mount}/keys/k")
        assert (await c.request("POST", path, token=token, json=plain))[0] == 403
        await _ok(c, "POST", f"/v1/{mount}/keys/k", {"type": "aes256-gcm96"})
        assert (await _post_twice(c, path, token, plain))[0] == 200

        # The policy no longer grants the path: refused at once; granted again: answered.
        await _ok(
            c,
            "PUT",
            f"/v1/sys/policies/acl/{policy}",
            {"policy": 'path "other/*" { capabilities = ["update"] }'},
        )
        assert (await c.request("POST", path, token=token, json=plain))[0] == 403
        await _ok(c, "PUT", f"/v1/sys/policies/acl/{policy}", {"policy": only_plaintext})
        assert (await _post_twice(c, path, token, plain))[0] == 200

        # The mount moves away and back: no handler in between, then the new backend answers.
        await _ok(c, "POST", "/v1/sys/remount", {"from": mount, "to": mount + "moved"})
        assert (await c.request("POST", path, token=token, json=plain))[0] == 404
        await _ok(c, "POST", "/v1/sys/remount", {"from": mount + "moved", "to": mount})
        assert (await _post_twice(c, path, token, plain))[0] == 200

        # The token revoked: refused at once.
        await _ok(c, "POST", "/v1/auth/token/revoke", {"token": token})
        assert (await c.request("POST", path, token=token, json=plain))[0] == 403

        # A limited-use token is spent after its uses, however its writes were answered.
        created = await _ok(
            c, "POST", "/v1/auth/token/create", {"policies": [policy], "num_uses": 3}
        )
        limited = created["auth"]["client_token"]
        for _ in range(3):
            assert (await c.request("POST", path, token=limited, json=plain))[0] == 200
        assert (await c.request("POST", path, token=limited, json=plain))[0] == 403
    finally:
        await c.close()


async def test_planned_reads_check_the_callers_address_and_the_tokens_expiry(
    nats_url: str,
) -> None:
    """The plan's token comes from the token cache: its CIDR binding is checked against each
    request's own address, and an expired token is refused although its plan is there."""
    c = await start_cluster(nats_url)
    try:
        core = c.secrets[0].core
        assert core is not None

        async def lookup_self(token: str, addr: str) -> int:
            env = HttpRequest(
                method="GET",
                path="/v1/auth/token/lookup-self",
                headers={"x-vault-token": token},
                remote_addr=addr,
            )
            return (await handle_http(core, env)).status

        # A token without an entity (so planned) bound to CIDRs, as a token role's
        # token_bound_cidrs makes one: bound on the cached entry the plan will hold.
        bound = (await _ok(c, "POST", "/v1/auth/token/create", {"ttl": "1h"}))["auth"]
        entry = await core.tokens.lookup(bound["client_token"])
        assert entry is not None and not entry.entity_id
        entry.bound_cidrs = ["10.9.8.0/24"]
        for addr in ("10.9.8.7", "10.9.8.7", "10.9.9.7", "10.9.8.7", "127.0.0.1"):
            assert await lookup_self(bound["client_token"], addr) == (
                200 if addr.startswith("10.9.8.") else 403
            ), addr

        short = (await _ok(c, "POST", "/v1/auth/token/create", {"ttl": "2s"}))["auth"]
        assert await lookup_self(short["client_token"], "127.0.0.1") == 200
        assert await lookup_self(short["client_token"], "127.0.0.1") == 200
        entry = await core.tokens.lookup(short["client_token"])
        assert entry is not None
        # Past its expiry (well within the token cache's 5 s), the very next request fails.
        deadline = time.monotonic() + 20
        while time.time() < entry.expire_time + 0.05:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        assert await lookup_self(short["client_token"], "127.0.0.1") == 403
    finally:
        await c.close()
