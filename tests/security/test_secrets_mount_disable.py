"""Disabling or moving a secrets mount revokes its dynamic secrets at their backend: dbcloud API
keys are deleted at the provider (an emulator in its own process), not merely forgotten."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.dbcloud_helpers import dbcloud_provider, mount_dbcloud, provider_keys
from tests.fakes.process import Fake
from tests.harness import Cluster, start_cluster

pytestmark = pytest.mark.nats


@pytest.fixture
async def provider() -> AsyncIterator[Fake]:
    async with dbcloud_provider() as fake:
        yield fake


async def _dbcloud_with_two_keys(c: Cluster, fake: Fake, mount: str) -> list[str]:
    await mount_dbcloud(c, fake.url, mount)
    status, body = await c.request(
        "POST",
        f"/v1/{mount}/roles/proj",
        json={"project_id": "proj1", "roles": ["GROUP_DATA_ACCESS_READ_ONLY"], "ttl": "1h"},
    )
    assert status == 200, body
    leases = []
    for _ in range(2):
        status, body = await c.request("GET", f"/v1/{mount}/creds/proj")
        assert status == 200, body
        leases.append(body["lease_id"])
    assert len(await provider_keys(fake)) == 2
    return leases


async def test_disabling_a_dbcloud_mount_deletes_its_keys_at_the_provider(
    nats_url: str, provider: Fake
) -> None:
    c = await start_cluster(nats_url)
    try:
        leases = await _dbcloud_with_two_keys(c, provider, "dbc")
        status, body = await c.request("DELETE", "/v1/sys/mounts/dbc")
        assert status == 204, body
        assert await provider_keys(provider) == []
        for lease_id in leases:
            status, body = await c.request(
                "PUT", "/v1/sys/leases/lookup", json={"lease_id": lease_id}
            )
            assert status == 400 and body["errors"] == ["invalid lease"], body
    finally:
        await c.close()


async def test_moving_a_dbcloud_mount_deletes_its_keys_at_the_provider(
    nats_url: str, provider: Fake
) -> None:
    c = await start_cluster(nats_url)
    try:
        await _dbcloud_with_two_keys(c, provider, "dbc")
        status, body = await c.request(
            "POST", "/v1/sys/remount", json={"from": "dbc", "to": "dbc2"}
        )
        assert status == 200, body
        assert await provider_keys(provider) == []
        # The mount itself moved, with its configuration: it issues keys again.
        status, body = await c.request("GET", "/v1/dbc2/creds/proj")
        assert status == 200, body
        assert len(await provider_keys(provider)) == 1
    finally:
        await c.close()
