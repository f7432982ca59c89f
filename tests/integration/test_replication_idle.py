"""Without a DR secondary the replication service reads and hashes nothing; the Merkle index is
built from storage when something first needs it, and then agrees with storage."""

from __future__ import annotations

import asyncio

import pytest

from services.replication.indexer import Indexer
from tests.integration.test_replication_setup import (
    DR,
    Site,
    caught_up,
    close_site,
    enable_primary,
    enable_secondary,
    secondary_token,
    start_site,
)

pytestmark = pytest.mark.nats


async def _write(site: Site, name: str) -> None:
    code, body = await site.req(
        "POST", f"/v1/sys/policies/acl/{name}", json={"policy": 'path "x/*" {}'}
    )
    assert code in (200, 204), body


async def _fresh_root(site: Site) -> str:
    """The Merkle root of storage as it is, from an index built for the occasion."""
    assert site.repl is not None
    fresh = Indexer(site.repl.js, site.repl.bucket)
    try:
        await fresh.caught_up()
        return fresh.index.root()
    finally:
        await fresh.stop()


async def test_no_indexing_until_a_secondary_or_status_needs_it(unique: str) -> None:
    a, b = await asyncio.gather(start_site(), start_site())
    try:
        assert a.repl is not None and b.repl is not None
        for i in range(5):
            await _write(a, f"{unique}-{i}")
        indexer = a.repl.indexer
        assert indexer._task is None and indexer.index.seq == 0 and len(indexer.index) == 0

        # A primary's status shows the root of what storage holds, built on demand.
        await enable_primary(a)
        status = await a.status()
        assert status["merkle_root"] == await _fresh_root(a)
        assert indexer._task is not None and len(indexer.index) > 0

        # Later writes keep it current; a secondary attaching agrees with it.
        await _write(a, f"{unique}-after")
        token = await secondary_token(a, "dr1")
        code, body = await enable_secondary(b, token)
        assert code == 200, body
        synced = await caught_up(a, b)
        assert synced["merkle_root"] == await _fresh_root(a)

        # Disabling the primary leaves nothing to index for.
        code, body = await a.req("POST", DR + "primary/disable", json={})
        assert code in (200, 204), body
        assert indexer._task is None and len(indexer.index) == 0
    finally:
        await asyncio.gather(close_site(a), close_site(b))
