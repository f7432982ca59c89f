"""The DR failover drill: a primary under continuous KV writes dies (its nats-server is killed,
then every service); the secondary is promoted with an operation token built from the primary's
unseal key shares and, with no unseal call (promote and serve: the token unwraps the unseal key
the ceremony proved, services/replication/promote_key.py), serves every write acknowledged up
to its last streamed WAL index, with the primary's tokens. The failover time (kill to the first
successful read) is printed. The old primary comes back, is demoted and pointed at the new primary
with update-primary, and catches up by Merkle sync without a wipe."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

import pytest

from tests.integration.test_replication_setup import (
    DR,
    Site,
    caught_up,
    close_site,
    crash_services,
    kill_nats,
    operation_token,
    pair,
    restart_nats,
    restart_services,
    secondary_token,
    start_site,
    unseal,
    wait_until,
)

pytestmark = pytest.mark.nats

READER = 'path "secret/data/drill/*" { capabilities = ["read"] }'


@dataclass
class Writes:
    # write number -> the primary's last_wal seen after its acknowledgement (>= its WAL index)
    acked: dict[int, int] = field(default_factory=dict)
    failed: int = 0


async def write_forever(a: Site, writes: Writes, stop: asyncio.Event) -> None:
    pending: list[int] = []
    i = 0
    while not stop.is_set():
        try:
            code, _ = await a.req("POST", f"/v1/secret/data/drill/{i}", json={"data": {"i": i}})
            if code == 200:
                pending.append(i)
            else:
                writes.failed += 1
            if len(pending) >= 5:
                wal = (await a.status())["last_wal"]
                writes.acked.update(dict.fromkeys(pending, wal))
                pending.clear()
        except Exception:
            return  # the primary is gone: unacknowledged writes may be lost
        i += 1


async def test_failover_drill() -> None:
    a, b = await asyncio.gather(start_site(shares=3, threshold=2), start_site())
    try:
        await pair(a, b)
        code, _ = await a.req("POST", "/v1/sys/policies/acl/drill-reader", json={"policy": READER})
        assert code in (200, 204)
        code, body = await a.req(
            "POST", "/v1/auth/token/create", json={"policies": ["drill-reader"]}
        )
        assert code == 200, body
        reader = body["auth"]["client_token"]

        writes, stop = Writes(), asyncio.Event()
        writer = asyncio.create_task(write_forever(a, writes, stop))
        await wait_until(lambda: _ready(writes, 150), within=30, what="150 acknowledged writes")
        await caught_up(a, b)  # streaming under load keeps up

        # Crash the primary: NATS first (writes in flight fail), then every service.
        killed = time.monotonic()
        kill_nats(a)
        stop.set()
        writer.cancel()  # its request in flight would hold the gateway's shutdown
        with contextlib.suppress(asyncio.CancelledError):
            await writer
        await crash_services(a)

        async def cut_off() -> bool:
            s = await b.status()
            return s["primaries"][0]["connection_status"] == "disconnected"

        await wait_until(cut_off, within=10, what="the secondary to see the primary gone")
        last_streamed = (await b.status())["last_remote_wal"]

        # Before promotion the secondary is sealed and holds no usable key; a second secrets
        # replica of it too.
        code, body = await b.req("GET", "/v1/sys/seal-status", token="")
        assert code == 200 and body["sealed"] is True, body
        peer = await b.cluster.add_secrets_replica()
        assert peer.core is not None and peer.core.sealed
        # Promote with an operation token from the primary's shares: nothing else.
        ceremony = time.monotonic()
        tok = await operation_token(b, a.keys[1:])
        code, body = await b.req(
            "POST", DR + "secondary/promote", json={"dr_operation_token": tok}, token=""
        )
        assert code == 200 and body["complete"] is True and body["required"] == 2, body
        assert not body.get("warnings"), body  # no "unseal this cluster" left to do
        # Whichever replica the gateway picks serves: the promoting one unsealed, and handed
        # the key to its peer (sealed, as unseal shares are). Polled, with a deadline.
        deadline = time.monotonic() + 10
        while True:
            code, first = await b.req("GET", "/v1/secret/data/drill/0", token=reader)
            if code == 200 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.01)
        failover = time.monotonic() - killed
        assert code == 200 and first["data"]["data"] == {"i": 0}, (code, first)
        print(
            f"\nDR failover: {failover:.2f} s from killing the primary to the first read "
            f"({time.monotonic() - ceremony:.2f} s of it from the operation-token ceremony on)"
        )
        assert (await b.status())["mode"] == "primary"
        # The other replica takes the keyring from the one that unsealed (no unseal call).
        await wait_until(
            lambda: _unsealed(peer), within=15, what="the second replica to unseal as well"
        )
        for _ in range(10):  # both replicas serve, without any unseal call
            code, body = await b.req("GET", "/v1/secret/data/drill/1", token=reader)
            assert code == 200, body

        covered = [i for i, wal in writes.acked.items() if wal <= last_streamed]
        assert len(covered) >= 100, (len(covered), len(writes.acked))
        for i in covered:
            code, body = await b.req("GET", f"/v1/secret/data/drill/{i}", token=reader)
            assert code == 200 and body["data"]["data"] == {"i": i}, (i, code, body)
        b.cluster.root_token = a.cluster.root_token  # B now answers to the primary's tokens
        code, body = await b.req("GET", "/v1/auth/token/lookup-self")
        assert code == 200 and body["data"]["policies"] == ["root"], body

        # The new primary takes writes; the old one comes back, demotes, and follows it.
        for i in range(10):
            code, _ = await b.req("POST", f"/v1/secret/data/after/{i}", json={"data": {"i": i}})
            assert code == 200
        restart_nats(a)
        await restart_services(a)
        await unseal(a, a.keys[:2])
        assert (await a.status())["mode"] == "primary"
        code, body = await a.req("POST", DR + "primary/demote", json={})
        assert code in (200, 204), body
        demoted = await a.status()
        assert (
            demoted["mode"] == "secondary"
            and demoted["cluster_id"] == (await b.status())["cluster_id"]
        )
        assert a.repl is not None
        before = (await a.repl.js.stream_info(f"KV_{a.repl.bucket}")).state

        await b.req("POST", DR + "primary/enable", json={})  # already primary: a no-op 400
        token = await secondary_token(b, "old-primary")
        tok_a = await operation_token(a, a.keys[:2])
        code, body = await a.req(
            "POST",
            DR + "secondary/update-primary",
            json={"dr_operation_token": tok_a, "token": token},
            token="",
        )
        assert code in (200, 204), body
        await caught_up(b, a, within=30)
        after = (await a.repl.js.stream_info(f"KV_{a.repl.bucket}")).state
        # The Merkle sync re-sends whole buckets, so an unchanged key that shares a bucket with
        # a changed one is written again (same value, new sequence): the first sequence may
        # move. A wipe would leave none of the entries stored before; the sync keeps most.
        kept = after.messages - (after.last_seq - before.last_seq)
        assert after.first_seq <= before.last_seq, "the old primary's storage was wiped"
        assert kept >= before.messages // 2, (kept, before.messages)
        for i in range(10):
            code, body = await b.req("GET", f"/v1/secret/data/after/{i}", token=reader)
            assert code == 403 or code == 200  # reader's policy covers drill/ only
    finally:
        await asyncio.gather(close_site(a), close_site(b))


async def _unsealed(svc: object) -> bool:
    core = getattr(svc, "core", None)
    return core is not None and not core.sealed


async def _ready(writes: Writes, n: int) -> bool:
    return len(writes.acked) >= n
