"""A token create whose writes fail part way leaves nothing behind: no record, no accessor or
parent index, no lease; the caller gets a retryable 503 and the next create works."""

from __future__ import annotations

import pytest

from tests.fakes.faulty_storage import failing_writes
from tests.harness import start_cluster

pytestmark = pytest.mark.nats


@pytest.mark.parametrize(
    "marker",
    ["sys/token/id/", "sys/token/accessor/", "sys/token/parent/", "/auth/token/create/h"],
)
async def test_a_failed_create_leaves_no_token_index_or_lease(nats_url: str, marker: str) -> None:
    c = await start_cluster(nats_url)
    try:
        core = c.secrets[0].core
        assert core is not None
        tokens = core.tokens._view("root")
        assert tokens is not None
        leases = core.expiration.view

        async def stored() -> set[str]:
            return set(await tokens.list_all("")) | {
                "lease:" + k for k in await leases.list_all("")
            }

        before = await stored()
        with failing_writes(core.storage, marker) as refused:
            status, body = await c.request("POST", "/v1/auth/token/create", json={"ttl": "1h"})
        assert refused, f"no write matched {marker!r}"
        assert status == 503, body
        assert await stored() == before
        status, body = await c.request("GET", "/v1/auth/token/accessors?list=true")
        assert status == 200 and len(body["data"]["keys"]) == 1, body  # root's only

        status, body = await c.request("POST", "/v1/auth/token/create", json={"ttl": "1h"})
        assert status == 200, body
        after = await stored()
        assert len(after - before) == 4  # record, accessor and parent index, lease
    finally:
        await c.close()
