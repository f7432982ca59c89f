"""The dbcloud engine through the gateway against a provider emulator in its own process:
roles and their 400s, creds creating digest-authenticated API keys with access lists, and keys
deleted at the provider on lease expiry and revocation; renew up to max_ttl; 502s."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from tests.dbcloud_helpers import PRIV, PUB, dbcloud_provider, mount_dbcloud, provider_keys
from tests.fakes.process import Fake, start_fake
from tests.harness import start_cluster

pytestmark = pytest.mark.nats


@pytest.fixture
async def provider() -> AsyncIterator[Fake]:
    async with dbcloud_provider() as fake:
        yield fake


async def wait_until(check, limit: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + limit
    while not await check():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.2)


async def test_roles_and_bad_input(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        status, body = await c.request("POST", "/v1/sys/mounts/dbcloud", json={"type": "dbcloud"})
        assert status == 204, body
        status, body = await c.request("POST", "/v1/dbcloud/config", json={"public_key": "p"})
        assert status == 400 and "private_key" in body["errors"][0]
        status, body = await c.request("GET", "/v1/dbcloud/creds/none")
        assert status == 400, body

        bad = [
            ({"roles": ["ORG_MEMBER"]}, "exactly one of organization_id and project_id"),
            ({"organization_id": "o", "project_id": "p", "roles": ["ORG_MEMBER"]}, "exactly one"),
            ({"organization_id": "o"}, "at least one role"),
            ({"organization_id": "o", "roles": []}, "at least one role"),
            ({"organization_id": "o", "roles": ["GROUP_OWNER"]}, "not valid for an organization"),
            ({"project_id": "p", "roles": "ORG_OWNER"}, "not valid for a project"),
            (
                {
                    "organization_id": "o",
                    "roles": ["ORG_MEMBER"],
                    "ip_addresses": ["1.2.3.4"],
                    "cidr_blocks": ["10.0.0.0/8"],
                },
                "mutually exclusive",
            ),
            (
                {"organization_id": "o", "roles": ["ORG_MEMBER"], "ip_addresses": ["1.2.3"]},
                "invalid IP address",
            ),
            (
                {"organization_id": "o", "roles": ["ORG_MEMBER"], "cidr_blocks": ["nope"]},
                "invalid CIDR",
            ),
            (
                {"organization_id": "o", "roles": ["ORG_MEMBER"], "ttl": "2h", "max_ttl": "1h"},
                "ttl cannot be greater",
            ),
        ]
        for js, message in bad:
            status, body = await c.request("POST", "/v1/dbcloud/roles/r", json=js)
            assert status == 400, (js, body)
            assert message in body["errors"][0], (js, body)

        status, body = await c.request(
            "POST",
            "/v1/dbcloud/roles/org",
            json={
                "organization_id": "org1",
                "roles": "ORG_MEMBER,ORG_READ_ONLY",
                "ip_addresses": ["192.168.1.3"],
                "ttl": "30m",
                "max_ttl": "1h",
            },
        )
        assert status == 200, body
        assert body["data"]["roles"] == ["ORG_MEMBER", "ORG_READ_ONLY"]
        status, body = await c.request(
            "POST",
            "/v1/dbcloud/roles/proj",
            json={
                "project_id": "proj1",
                "roles": ["GROUP_READ_ONLY"],
                "cidr_blocks": ["10.1.0.0/16"],
            },
        )
        assert status == 200, body
        status, body = await c.request("GET", "/v1/dbcloud/roles/org")
        assert status == 200, body
        assert body["data"] == {
            "name": "org",
            "organization_id": "org1",
            "project_id": "",
            "roles": ["ORG_MEMBER", "ORG_READ_ONLY"],
            "ip_addresses": ["192.168.1.3"],
            "cidr_blocks": [],
            "ttl": "30m0s",
            "max_ttl": "1h0m0s",
        }
        # Updating replaces the role list; scope stays.
        status, body = await c.request(
            "POST", "/v1/dbcloud/roles/org", json={"roles": ["ORG_OWNER"]}
        )
        assert status == 200 and body["data"]["roles"] == ["ORG_OWNER"], body
        assert body["data"]["organization_id"] == "org1"

        status, body = await c.request("GET", "/v1/dbcloud/roles")
        assert status == 200 and isinstance(body, list), body
        assert sorted(r["name"] for r in body) == ["org", "proj"]
        status, body = await c.request("GET", "/v1/dbcloud/roles?list=true")
        assert status == 200 and body["data"]["keys"] == ["org", "proj"]
        status, _ = await c.request("DELETE", "/v1/dbcloud/roles/org")
        assert status == 204
        status, _ = await c.request("GET", "/v1/dbcloud/roles/org")
        assert status == 404
        status, body = await c.request("GET", "/v1/dbcloud/creds/proj")
        assert status == 400 and "not configured" in body["errors"][0], body
    finally:
        await c.close()


async def test_creds_are_deleted_at_the_provider_when_the_lease_expires(
    nats_url: str, provider: Fake
) -> None:
    c = await start_cluster(nats_url)
    try:
        await mount_dbcloud(c, provider.url)
        status, body = await c.request(
            "POST",
            "/v1/dbcloud/roles/short",
            json={
                "organization_id": "org1",
                "roles": ["ORG_MEMBER"],
                "ip_addresses": ["10.0.0.7"],
                "ttl": "3s",
                "max_ttl": "10s",
            },
        )
        assert status == 200, body
        status, body = await c.request("GET", "/v1/dbcloud/creds/short")
        assert status == 200, body
        assert body["lease_id"].startswith("dbcloud/creds/short/")
        assert body["lease_duration"] == 3 and body["renewable"] is True
        data = body["data"]
        assert data["lease_duration"] == "3s" and data["lease_renewable"] is True
        assert data["description"].startswith("trellis-short-") and data["private_key"]
        keys = await provider_keys(provider)
        assert [k["publicKey"] for k in keys] == [data["public_key"]]
        assert keys[0]["accessList"] == [{"ipAddress": "10.0.0.7"}]
        assert keys[0]["roles"] == ["ORG_MEMBER"] and keys[0]["orgId"] == "org1"

        async def gone() -> bool:
            return await provider_keys(provider) == []

        await wait_until(gone)
        status, body = await c.request(
            "PUT", "/v1/sys/leases/lookup", json={"lease_id": body["lease_id"]}
        )
        assert status == 400, body  # the lease is gone too
    finally:
        await c.close()


async def test_project_creds_revoke_and_renew(nats_url: str, provider: Fake) -> None:
    c = await start_cluster(nats_url)
    try:
        await mount_dbcloud(c, provider.url)
        status, body = await c.request(
            "POST",
            "/v1/dbcloud/roles/proj",
            json={
                "project_id": "proj1",
                "roles": ["GROUP_DATA_ACCESS_READ_ONLY"],
                "cidr_blocks": ["10.2.0.0/16"],
                "ttl": "1h",
                "max_ttl": "90m",
            },
        )
        assert status == 200, body
        status, body = await c.request("GET", "/v1/dbcloud/creds/proj")
        assert status == 200, body
        lease_id = body["lease_id"]
        keys = await provider_keys(provider)
        assert len(keys) == 1 and keys[0]["projects"] == ["proj1"]
        assert keys[0]["accessList"] == [{"cidrBlock": "10.2.0.0/16"}]

        # Renew extends, but never past max_ttl.
        status, body = await c.request(
            "PUT", "/v1/sys/leases/renew", json={"lease_id": lease_id, "increment": "10h"}
        )
        assert status == 200, body
        assert 5300 <= body["lease_duration"] <= 5400, body

        status, body = await c.request("PUT", "/v1/sys/leases/revoke", json={"lease_id": lease_id})
        assert status == 204, body
        assert await provider_keys(provider) == []
    finally:
        await c.close()


async def test_provider_down_is_502_and_nothing_half_created(nats_url: str) -> None:
    failing = await start_fake(
        "tests.fakes.dbcloud_provider",
        "--public-key",
        PUB,
        "--private-key",
        PRIV,
        "--org",
        "org1",
        "--fail-access-list",
    )
    c = await start_cluster(nats_url)
    try:
        await mount_dbcloud(c, failing.url)
        status, body = await c.request(
            "POST",
            "/v1/dbcloud/roles/r",
            json={"organization_id": "org1", "roles": ["ORG_MEMBER"], "ip_addresses": ["10.0.0.1"]},
        )
        assert status == 200, body
        status, body = await c.request("GET", "/v1/dbcloud/creds/r")
        assert status == 502, body
        assert "maintenance" in body["errors"][0]
        assert await provider_keys(failing) == []  # the key was removed again
        status, body = await c.request("GET", "/v1/sys/leases?list=true")

        # Wrong admin key: the provider's 401 becomes a 502 naming it.
        await c.request(
            "POST",
            "/v1/dbcloud/config",
            json={"public_key": PUB, "private_key": "wrong", "api_url": failing.url},
        )
        status, body = await c.request("GET", "/v1/dbcloud/creds/r")
        assert status == 502 and "401" in body["errors"][0], body

        await failing.stop()
        await c.request(
            "POST",
            "/v1/dbcloud/config",
            json={"public_key": PUB, "private_key": PRIV, "api_url": failing.url},
        )
        status, body = await c.request("GET", "/v1/dbcloud/creds/r")
        assert status == 502 and "unreachable" in body["errors"][0], body
    finally:
        await c.close()
        await failing.stop()
