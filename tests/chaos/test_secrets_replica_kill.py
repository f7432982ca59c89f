"""Kill -9 one of two secrets replicas under write load: no acknowledged write is lost, and the
only errors clients see are 503/504 for requests in flight on the dead replica."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from pathlib import Path

import aiohttp
import pytest

from tests.conftest import free_port
from tests.procs import spawn_service, wait_http

pytestmark = pytest.mark.nats


def _log_tails(log_dir: Path) -> str:
    return "\n".join(
        p.name + ":\n" + p.read_text(errors="replace")[-3000:]
        for p in sorted(log_dir.glob("secrets-*.log"))
    )


async def test_kill_one_replica_under_writes(nats_url: str, tmp_path: Path) -> None:
    cluster = "chaos" + uuid.uuid4().hex[:8]
    port = free_port()
    env = {
        "TRELLIS_SECRETS_ADDR": f"127.0.0.1:{port}",
        "TRELLIS_WORKSPACE_ADDR": "127.0.0.1:0",
        "TRELLIS_SCHEDULER_ADDR": "127.0.0.1:0",
        # Requests in flight on the dead replica end in a 504 after this; long enough for a
        # first init and unseal on a loaded machine (the parallel suite).
        "TRELLIS_REQUEST_TIMEOUT": "15",
    }
    health = [free_port(), free_port()]
    procs = [
        spawn_service("secrets", nats_url, cluster, tmp_path, health_port=h, **env) for h in health
    ]
    procs.append(spawn_service("gateway", nats_url, cluster, tmp_path, **env))
    base = f"http://127.0.0.1:{port}"
    try:
        await asyncio.to_thread(wait_http, base + "/v1/sys/seal-status")
        async with aiohttp.ClientSession() as s:
            async with s.post(
                base + "/v1/sys/init", json={"secret_shares": 1, "secret_threshold": 1}
            ) as r:
                init = await r.json()
            async with s.post(base + "/v1/sys/unseal", json={"key": init["keys"][0]}) as r:
                unsealed = r.status == 200 and (await r.json())["sealed"] is False
            # Under load a first unseal may still outlast the gateway's timeout (a 504) and
            # complete: wait for it rather than fail the set-up.
            deadline = time.monotonic() + 60
            while not unsealed:
                assert time.monotonic() < deadline, "the cluster did not unseal"
                await asyncio.sleep(0.1)
                async with s.get(base + "/v1/sys/seal-status") as r:
                    unsealed = r.status == 200 and (await r.json())["sealed"] is False
            # Each replica unseals on its own (a peer's share or keyring): the kill is a test
            # of failover only once both serve.
            for h in health:
                while True:
                    assert time.monotonic() < deadline, f"replica on {h} did not unseal"
                    with contextlib.suppress(aiohttp.ClientError):
                        async with s.get(f"http://127.0.0.1:{h}/readyz") as r:
                            state = await r.json()
                            if r.status == 200 and state.get("sealed") is False:
                                break
                    await asyncio.sleep(0.1)
            hdr = {"X-Vault-Token": init["root_token"]}
            acked: dict[str, int] = {}
            enough = asyncio.Event()
            # The load ends once the survivor acknowledged 60 writes after the kill.
            after_kill = asyncio.Event()
            acked_at_kill: list[int] = []
            statuses: dict[int, int] = {}
            before_kill: dict[int, int] = {}
            errors: list[str] = []
            stop = time.monotonic() + 60

            async def writer(w: int) -> None:
                n = 0
                while time.monotonic() < stop and not after_kill.is_set():
                    key = f"w{w}/k{n}"
                    try:
                        async with s.post(
                            f"{base}/v1/secret/data/{key}", headers=hdr, json={"data": {"n": n}}
                        ) as r:
                            statuses[r.status] = statuses.get(r.status, 0) + 1
                            if r.status != 200 and len(errors) < 5:
                                errors.append(f"{r.status} {await r.text()}")
                            if r.status == 200:
                                acked[key] = n
                                if len(acked) >= 50:
                                    enough.set()
                                if acked_at_kill and len(acked) >= acked_at_kill[0] + 60:
                                    after_kill.set()
                    except aiohttp.ClientError:
                        statuses[0] = statuses.get(0, 0) + 1
                    n += 1

            async def killer() -> None:
                # Kill once both replicas are serving the writes.
                await enough.wait()
                procs[0].kill()
                acked_at_kill.append(len(acked))
                before_kill.update(statuses)

            await asyncio.gather(killer(), *(writer(w) for w in range(8)))
            # The statuses before the kill tell a survivor that never served from one that
            # stopped serving when its peer died.
            if not after_kill.is_set():
                survivor = procs[1].poll()
                logs = _log_tails(tmp_path)
                pytest.fail(
                    f"writes stopped after the kill: {statuses}; before it: {before_kill}; "
                    f"first errors: {errors}; survivor exit code: {survivor}\n{logs}"
                )
            assert len(acked) > 100
            assert set(statuses) <= {200, 503, 504}, statuses
            missing = []
            for key, n in acked.items():
                async with s.get(f"{base}/v1/secret/data/{key}", headers=hdr) as r:
                    body = await r.json()
                    if r.status != 200 or body["data"]["data"] != {"n": n}:
                        missing.append(key)
            assert missing == [], f"lost {len(missing)} acknowledged writes"
    finally:
        for p in procs:
            p.kill()
            p.wait()
