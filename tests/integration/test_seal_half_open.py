"""A replica whose unseal fails half way (keys in, tables not loaded: a storage timeout under
load) does not stay half open, answering "sealed" for good while ignoring shares and peers: it
closes its barrier again and takes the keyring from a peer."""

from __future__ import annotations

import asyncio
import time

import nats.errors
import pytest

from tests.harness import start_cluster

pytestmark = pytest.mark.nats


async def test_a_replica_whose_unseal_fails_once_unseals_from_a_peer(nats_url: str) -> None:
    c = await start_cluster(nats_url, replicas=2, initialize=False)
    try:
        cores = [svc.core for svc in c.secrets]
        assert cores[0] is not None and cores[1] is not None
        flaky = cores[1]
        real = flaky.post_unseal
        failures: list[float] = []

        async def fails_once() -> None:
            if not failures and not flaky.seal.initializing:
                failures.append(time.monotonic())
                raise nats.errors.TimeoutError
            await real()

        flaky.post_unseal = fails_once  # type: ignore[method-assign]
        status, body = await c.request(
            "POST", "/v1/sys/init", token="", json={"secret_shares": 1, "secret_threshold": 1}
        )
        assert status == 200, body
        c.root_token = body["root_token"]
        # Whichever replica takes the share hands it to the other (the flaky one fails once).
        status, got = await c.request("POST", "/v1/sys/unseal", json={"key": body["keys"][0]})
        assert status in (200, 503), got

        deadline = time.monotonic() + 20
        while not all(not core.sealed for core in cores):
            assert time.monotonic() < deadline, (
                f"sealed: {[core.sealed for core in cores]}, "
                f"barrier sealed: {[core.barrier.sealed for core in cores]}"
            )
            await asyncio.sleep(0.05)
        assert failures, "the injected failure never happened"
        for _ in range(6):  # both replicas serve
            status, got = await c.request("GET", "/v1/sys/mounts")
            assert status == 200, got
    finally:
        await c.close()
