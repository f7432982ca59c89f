"""The expiry leader's in-memory schedule against real storage: leases and tokens written by any
replica expire on time, a new leader rebuilds the schedule from storage, and renewal and
revocation move or remove entries."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest

from services.secrets.core.core import Core
from services.secrets.core.expiration import ExpirationManager, LeaseEntry, _slot
from services.secrets.core.namespaces import ROOT
from services.secrets.core.tokens import TokenEntry
from services.secrets.service import SecretsService
from tests.harness import Cluster, start_cluster

pytestmark = pytest.mark.nats

# The pass runs every 0.5 s; the rest is slack for a busy 2-core machine.
LATE = 3.0


async def _until(pred: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await pred():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout:.1f}s")


def _core(svc: SecretsService) -> Core:
    assert svc.core is not None
    return svc.core


def _leader(c: Cluster) -> SecretsService:
    return next(s for s in c.secrets if s.lease is not None and s.lease.is_leader)


async def _following(exp: ExpirationManager) -> None:
    async def loaded() -> bool:
        return exp._loaded.is_set()

    await _until(loaded, 15, "the leader follows the schedule")


async def _lease(core: Core, unique: str, ttl: int) -> LeaseEntry:
    return await core.expiration.register(
        path=f"auth/token/expiry-{unique}",
        namespace_id="root",
        mount_path="auth/token/",
        secret_type="",
        internal={},
        ttl=ttl,
        max_ttl=0,
        renewable=True,
        token="",
    )


def _name(lease: LeaseEntry) -> str:
    return _slot(lease.expire_time, lease.lease_id)


async def test_a_lease_written_by_another_replica_expires_on_time(
    nats_url: str, unique: str
) -> None:
    c = await start_cluster(nats_url, replicas=2)
    try:
        leader = _leader(c)
        other = next(s for s in c.secrets if s is not leader)
        exp = _core(leader).expiration
        await _following(exp)
        # Written by the other replica: only the KV stream can tell the leader about it.
        lease = await _lease(_core(other), unique, ttl=2)

        async def indexed() -> bool:
            return _name(lease) in exp._index

        await _until(indexed, 5, "the leader sees the other replica's schedule entry")

        async def gone() -> bool:
            # The lease goes first, then its schedule entry, from storage and the index.
            return (
                await exp.get(lease.lease_id) is None
                and await exp.view.get(f"at/{_name(lease)}") is None
                and _name(lease) not in exp._index
            )

        await _until(gone, lease.expire_time - time.time() + LATE, "the lease expires")
        assert time.time() >= lease.expire_time  # not early either
    finally:
        await c.close()


async def test_tokens_expire_on_time_and_renewal_moves_them(nats_url: str, unique: str) -> None:
    c = await start_cluster(nats_url, replicas=2)
    try:
        core = _core(_leader(c))
        exp = core.expiration
        await _following(exp)
        view = core.namespaces.view(ROOT).sub("sys/token/")
        tokens: list[str] = []
        for _ in range(2):
            status, body = await c.request(
                "POST",
                "/v1/auth/token/create",
                json={"ttl": "2s", "explicit_max_ttl": "60s", "display_name": unique},
            )
            assert status == 200, body
            tokens.append(body["auth"]["client_token"])
        brief, renewed = tokens

        async def entry(token: str) -> TokenEntry | None:
            return await view.get_obj(f"id/{core.tokens.hash(token)}", TokenEntry)

        before = await entry(renewed)
        assert before is not None
        # Scheduled from the token's lease, with no schedule entry of its own in storage.
        first_name = _slot(before.expire_time, exp.auth_lease_id(before))
        assert first_name in exp._index
        assert (
            await exp.view.get(f"at/{_slot(before.expire_time, core.tokens.hash(renewed))}") is None
        )
        status, body = await c.request(
            "POST", "/v1/auth/token/renew-self", token=renewed, json={"increment": "30s"}
        )
        assert status == 200 and body["auth"]["lease_duration"] > 10, body
        after = await entry(renewed)
        assert after is not None

        async def brief_gone() -> bool:
            return await entry(brief) is None

        await _until(brief_gone, 2 + LATE, "the 2 s token is revoked")
        status, _ = await c.request("GET", "/v1/auth/token/lookup-self", token=brief)
        assert status == 403

        async def first_passed() -> bool:
            return first_name not in exp._index

        await _until(first_passed, 2 + LATE, "the renewed token's first expiry is handled")
        status, body = await c.request("GET", "/v1/auth/token/lookup-self", token=renewed)
        assert status == 200, body
        assert _slot(after.expire_time, exp.auth_lease_id(after)) in exp._index
    finally:
        await c.close()


async def test_renew_and_revoke_update_the_index(nats_url: str, unique: str) -> None:
    c = await start_cluster(nats_url, replicas=2)
    try:
        leader = _leader(c)
        other = next(s for s in c.secrets if s is not leader)
        exp = _core(leader).expiration
        await _following(exp)
        moved = await _lease(_core(leader), f"{unique}-moved", ttl=300)
        revoked_here = await _lease(_core(leader), f"{unique}-here", ttl=300)
        revoked_there = await _lease(_core(leader), f"{unique}-there", ttl=300)
        for lease in (moved, revoked_here, revoked_there):
            assert _name(lease) in exp._index  # the leader's own writes: at once

        old_name = _name(moved)
        moved = await exp.renew(moved, 1)
        assert old_name not in exp._index and _name(moved) in exp._index

        await exp.revoke(revoked_here)
        assert _name(revoked_here) not in exp._index

        # Revoked by the other replica: the stream takes it out of the leader's index.
        there = await _core(other).expiration.get(revoked_there.lease_id)
        assert there is not None
        await _core(other).expiration.revoke(there)

        async def unindexed() -> bool:
            return _name(revoked_there) not in exp._index

        await _until(unindexed, 5, "the other replica's revocation reaches the index")

        async def moved_gone() -> bool:
            return await exp.get(moved.lease_id) is None

        await _until(moved_gone, moved.expire_time - time.time() + LATE, "renewed lease expires")
    finally:
        await c.close()


async def test_a_new_leader_rebuilds_the_schedule_from_storage(nats_url: str, unique: str) -> None:
    c = await start_cluster(nats_url, replicas=2)
    try:
        leader = _leader(c)
        other = next(s for s in c.secrets if s is not leader)
        await _following(_core(leader).expiration)
        later = await _lease(_core(leader), f"{unique}-later", ttl=600)
        soon = await _lease(_core(leader), f"{unique}-soon", ttl=4)
        status, body = await c.request(
            "POST", "/v1/auth/token/create", json={"ttl": "4s", "display_name": unique}
        )
        assert status == 200, body
        token = body["auth"]["client_token"]
        await c.stop_secrets_replica(leader)
        exp = _core(other).expiration

        async def took_over() -> bool:
            return other.lease is not None and other.lease.is_leader and exp._loaded.is_set()

        await _until(took_over, 20, "the other replica takes over expiry")
        assert _name(later) in exp._index  # loaded from storage, not seen being written

        async def soon_gone() -> bool:
            return await exp.get(soon.lease_id) is None

        await _until(soon_gone, max(0.0, soon.expire_time - time.time()) + LATE, "lease expires")
        assert await exp.get(later.lease_id) is not None
        # The token's expiry comes from its lease, which the new leader read from storage.
        view = _core(other).namespaces.view(ROOT).sub("sys/token/")

        async def token_gone() -> bool:
            return await view.get(f"id/{_core(other).tokens.hash(token)}") is None

        await _until(token_gone, LATE, "the token expires")
    finally:
        await c.close()
