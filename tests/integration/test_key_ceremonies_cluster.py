"""Key ceremonies across secrets replicas (issue 21): a rotation made on a replica that joined
by hand-off (so never held the root key itself) reaches every replica through the sealed
invalidation; a rekey whose steps land on different replicas completes; afterwards only the
new shares unseal; a batch token works on every replica."""

from __future__ import annotations

import asyncio

from services.secrets.core import rotation
from tests.harness import start_cluster


async def _until(check, what: str, timeout: float = 15.0) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.02)


async def test_rotation_rekey_and_batch_tokens_across_replicas(nats_url: str) -> None:
    c = await start_cluster(nats_url, replicas=2, shares=3, threshold=2)
    try:
        joined = await c.add_secrets_replica()
        await _until(lambda: joined.core is not None and not joined.core.sealed, "hand-off")
        assert joined.core is not None
        assert joined.core.seal.root_key is None  # it got the keyring, not the root key
        status, _ = await c.request("POST", "/v1/secret/data/old", json={"data": {"v": "1"}})
        assert status == 200

        ring = await rotation.rotate(joined.core)
        term = ring.active_term
        assert term == 2
        await _until(
            lambda: all(
                s.core is not None
                and s.core.barrier.keyring is not None
                and s.core.barrier.keyring.active_term == term
                for s in c.secrets
            ),
            "every replica learns the new term",
        )
        for _ in range(6):  # the queue group spreads these over the replicas
            status, body = await c.request("GET", "/v1/sys/key-status")
            assert status == 200 and body["data"]["term"] == term
            status, body = await c.request("GET", "/v1/secret/data/old")
            assert status == 200 and body["data"]["data"] == {"v": "1"}
        status, _ = await c.request("POST", "/v1/secret/data/new", json={"data": {"v": "2"}})
        assert status == 200

        # A rotation whose invalidation a replica missed: reading a value under the unknown
        # term makes that replica re-read the keyring instead of failing.
        a, b = (s.core for s in c.secrets[:2])
        assert a is not None and b is not None

        async def quiet(_what: str) -> None:
            return None

        a.broadcast_invalidate = quiet  # type: ignore[method-assign]
        try:
            silent = (await rotation.rotate(a)).active_term
        finally:
            del a.broadcast_invalidate
        await a.barrier.put("test/silent", b"under-the-new-term")
        assert b.barrier.keyring is not None and b.barrier.keyring.active_term == silent - 1
        assert await b.barrier.get("test/silent") == b"under-the-new-term"
        assert b.barrier.keyring.active_term == silent

        # A batch token made on one replica works on all of them.
        status, body = await c.request(
            "POST", "/v1/auth/token/create", json={"type": "batch", "policies": ["default"]}
        )
        assert status == 200, body
        batch = body["auth"]["client_token"]
        for _ in range(6):
            status, body = await c.request("GET", "/v1/auth/token/lookup-self", token=batch)
            assert status == 200 and body["data"]["type"] == "batch"

        # Rekey: the steps land on whichever replica the queue group picks.
        status, body = await c.request(
            "PUT", "/v1/sys/rekey/init", token="", json={"secret_shares": 2, "secret_threshold": 2}
        )
        assert status == 200 and body["started"] is True, body
        nonce = body["nonce"]
        old = c.unseal_keys
        status, body = await c.request(
            "PUT", "/v1/sys/rekey/update", token="", json={"key": old[0], "nonce": nonce}
        )
        assert status == 200 and body["progress"] == 1, body
        status, body = await c.request(
            "PUT", "/v1/sys/rekey/update", token="", json={"key": old[1], "nonce": nonce}
        )
        assert status == 200 and body["complete"] is True, body
        new = body["keys"]
        assert len(new) == 2

        status, _ = await c.request("PUT", "/v1/sys/seal")
        assert status == 204
        await _until(
            lambda: all(s.core is not None and s.core.sealed for s in c.secrets), "all sealed"
        )
        for key in old[:2]:
            status, body = await c.request("PUT", "/v1/sys/unseal", token="", json={"key": key})
        assert status == 400 and "do not open" in body["errors"][0]
        for key in new:
            status, body = await c.request("PUT", "/v1/sys/unseal", token="", json={"key": key})
            assert status == 200, body
        assert body["sealed"] is False and (body["t"], body["n"]) == (2, 2)
        await _until(
            lambda: all(s.core is not None and not s.core.sealed for s in c.secrets),
            "every replica unsealed by the new shares",
        )
        status, body = await c.request("GET", "/v1/secret/data/new")
        assert status == 200 and body["data"]["data"] == {"v": "2"}

        # A rekey that changes the threshold (2 -> 1): every replica counts the next share
        # against the new one, so one share unseals them all at once.
        status, body = await c.request(
            "PUT", "/v1/sys/rekey/init", token="", json={"secret_shares": 1, "secret_threshold": 1}
        )
        assert status == 200, body
        nonce = body["nonce"]
        for key in new:
            status, body = await c.request(
                "PUT", "/v1/sys/rekey/update", token="", json={"key": key, "nonce": nonce}
            )
            assert status == 200, body
        assert body["complete"] is True, body
        single = body["keys"][0]
        status, _ = await c.request("PUT", "/v1/sys/seal")
        assert status == 204
        status, body = await c.request("PUT", "/v1/sys/unseal", token="", json={"key": single})
        assert status == 200 and body["sealed"] is False and body["t"] == 1, body
        for _ in range(6):
            status, body = await c.request("GET", "/v1/secret/data/new")
            assert status == 200, body
    finally:
        await c.close()


async def test_auto_rotation_batch_expiry_and_open_metrics(nats_url: str) -> None:
    c = await start_cluster(nats_url, unauthenticated_metrics_access=True)
    try:
        core = c.secrets[0].core
        assert core is not None
        # Past max_operations the expiry leader's check rotates (the bound is lowered here
        # below what the API accepts, to reach it in a test).
        await core.barrier.view("").put_obj(
            rotation.ROTATE_CONFIG, rotation.RotateConfig(max_operations=1)
        )
        rotation._next_check.clear()
        term = core.barrier.keyring.active_term  # type: ignore[union-attr]
        assert await rotation.maybe_auto_rotate(core) is True
        assert core.barrier.keyring.active_term == term + 1  # type: ignore[union-attr]
        # Checked at most every 30 s: an immediate second call does nothing.
        assert await rotation.maybe_auto_rotate(core) is False

        # A batch token stops working at its TTL, though nothing revokes it.
        status, body = await c.request(
            "POST",
            "/v1/auth/token/create",
            json={"type": "batch", "policies": ["default"], "ttl": "1s"},
        )
        assert status == 200, body
        batch = body["auth"]["client_token"]
        deadline = asyncio.get_running_loop().time() + 10
        while True:
            status, _ = await c.request("GET", "/v1/auth/token/lookup-self", token=batch)
            if status == 403:
                break
            assert status == 200
            assert asyncio.get_running_loop().time() < deadline, "the batch token never expired"
            await asyncio.sleep(0.1)

        # Two rekey starts at once: exactly one wins (compare-and-set in storage).
        both = await asyncio.gather(
            *(
                c.request(
                    "PUT",
                    "/v1/sys/rotate/root/init",
                    json={"secret_shares": 1, "secret_threshold": 1},
                )
                for _ in range(2)
            )
        )
        assert sorted(status for status, _ in both) == [200, 400], both
        status, _ = await c.request("DELETE", "/v1/sys/rotate/root/init")
        assert status == 204

        # unauthenticated_metrics_access: sys/metrics without a token.
        status, body = await c.request("GET", "/v1/sys/metrics", token="")
        assert status == 200 and "Gauges" in body
    finally:
        await c.close()


async def test_key_status_and_auto_rotation_count_every_replicas_encryptions(
    nats_url: str,
) -> None:
    """Every replica writes, so sys/key-status answers the sum of the live replicas' counts
    (as Vault's active node, which sees every write), and automatic rotation compares that
    sum, not one replica's share, with max_operations."""
    c = await start_cluster(nats_url, replicas=2)
    try:
        cores = [s.core for s in c.secrets]
        assert all(core is not None for core in cores)
        a, b = cores[0], cores[1]
        assert a is not None and b is not None
        await _until(
            lambda: (
                a.encryption_counts.live_peers() == {b.seal.node_id}
                and b.encryption_counts.live_peers() == {a.seal.node_id}
            ),
            "each replica sees the other's state",
        )
        ring_a, ring_b = a.barrier.keyring, b.barrier.keyring
        assert ring_a is not None and ring_b is not None
        ring_a.encryptions, ring_b.encryptions = 600_000, 500_000
        for _ in range(6):  # the queue group spreads these over both replicas
            status, body = await c.request("GET", "/v1/sys/key-status")
            assert status == 200, body
            # Background writes (leases, token use) may add a few meanwhile.
            assert 1_100_000 <= body["data"]["encryptions"] < 1_100_100, body

        # A request no replica sealed gets no count.
        assert await b.encryption_counts._on_request(b"not a sealed box", None) == b""

        # Automatic rotation: neither replica alone is past 1,000,000; together they are.
        status, body = await c.request(
            "POST", "/v1/sys/rotate/config", json={"enabled": True, "max_operations": 1_000_000}
        )
        assert status in (200, 204), body
        term = ring_a.active_term
        rotation._next_check.clear()
        assert await rotation.maybe_auto_rotate(a) is True
        assert a.barrier.keyring is not None and a.barrier.keyring.active_term == term + 1

        # A replica that stops says so: the other counts only its own again.
        await c.stop_secrets_replica(c.secrets[1])
        await _until(lambda: not a.encryption_counts.live_peers(), "the stopped peer dropped")
        ring = a.barrier.keyring
        ring.encryptions = 7
        status, body = await c.request("GET", "/v1/sys/key-status")
        assert status == 200 and body["data"]["encryptions"] == 7, body
    finally:
        await c.close()
