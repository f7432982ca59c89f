"""Crypto workers on a real nats-server: ops over the bus, a 503 when no worker runs, and a
worker process killed under load costs retries, never a wrong certificate."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from typing import Any

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from services.crypto.client import crypto_call
from services.secrets.engines.pki import backend as pki_backend
from shared.errors import ServiceError
from tests.conftest import free_port
from tests.harness import start_cluster
from tests.integration.test_pki_api import add_worker, ok, pki_cluster

pytestmark = pytest.mark.nats
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


async def test_ops_over_the_bus(nats_url: str) -> None:
    c = await start_cluster(nats_url, initialize=False)
    try:
        await add_worker(c)
        bus, cluster = c.buses[0], c.settings.cluster_name
        key = await crypto_call(bus, cluster, "generate_key", {"key_type": "ed25519"})
        assert key["key_type"] == "ed25519" and "BEGIN PRIVATE KEY" in key["private_key"]
        with pytest.raises(ServiceError) as err:
            await crypto_call(bus, cluster, "generate_key", {"key_type": "rsa", "key_bits": 7})
        assert err.value.code == 400 and "unsupported RSA key size 7" in err.value.message
        with pytest.raises(ServiceError) as err:
            await crypto_call(bus, cluster, "no_such_op", {})
        assert err.value.code == 400 and "unknown crypto operation" in err.value.message
    finally:
        await c.close()


async def test_concurrent_calls_share_messages(
    nats_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Calls made together travel in fewer messages than calls, and each caller still gets its
    own answer: its own fresh key, or its own refusal."""
    c = await start_cluster(nats_url, initialize=False)
    try:
        await add_worker(c)
        bus, cluster = c.buses[0], c.settings.cluster_name
        messages = 0
        request = bus.request

        async def counting(*args: Any, **kwargs: Any) -> Any:
            nonlocal messages
            messages += 1
            return await request(*args, **kwargs)

        monkeypatch.setattr(bus, "request", counting)
        asks = [{"key_type": "ec", "key_bits": 7 if i == 13 else 256} for i in range(24)]
        got = await asyncio.gather(
            *(crypto_call(bus, cluster, "generate_key", a) for a in asks), return_exceptions=True
        )
        refused = got.pop(13)
        assert isinstance(refused, ServiceError) and refused.code == 400
        assert "unsupported EC key size 7" in refused.message
        assert all(isinstance(g, dict) and g["key_type"] == "ec" for g in got), got
        assert len({g["private_key"] for g in got}) == len(got)  # type: ignore[index]
        assert messages < len(asks)
    finally:
        await c.close()


async def test_no_worker_means_503(nats_url: str) -> None:
    async with pki_cluster(nats_url, workers=0) as c:
        status, body = await c.request(
            "POST", "/v1/pki/root/generate/internal", json={"common_name": "Root", "key_type": "ec"}
        )
        assert status == 503 and "no crypto worker" in body["errors"][0]


def start_worker_process(
    nats_url: str, cluster: str, port: int, key_file: str
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "TRELLIS_NATS_URL": nats_url,
        "TRELLIS_INSECURE_BUS": "true",  # the session's open test NATS
        "TRELLIS_CLUSTER_KEY_FILE": key_file,  # the test cluster's own key
        "TRELLIS_CLUSTER_NAME": cluster,
        "TRELLIS_LOG_LEVEL": "warning",
    }
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "services.cli",
            "run",
            "crypto",
            "--processes",
            "1",
            "--health-addr",
            f"127.0.0.1:{port}",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def wait_ready(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline:
            assert proc.poll() is None, "the worker process exited"
            try:
                async with s.get(f"http://127.0.0.1:{port}/readyz") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError("the crypto worker process did not become ready")


def check_issued(data: dict[str, Any], cn: str, issuer: x509.Certificate) -> None:
    """The certificate is the one asked for, signed by the issuer, and matches its key."""
    cert = x509.load_pem_x509_certificate(data["certificate"].encode())
    cert.verify_directly_issued_by(issuer)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == cn
    key = serialization.load_pem_private_key(data["private_key"].encode(), None)
    assert key.public_key() == cert.public_key()


async def test_killed_worker_costs_a_retry_not_a_wrong_certificate(
    nats_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pki_backend, "CALL_TIMEOUT", 2.0)
    async with pki_cluster(nats_url) as c:  # one in-process worker...
        port = free_port()
        proc = start_worker_process(
            nats_url, c.settings.cluster_name, port, c.settings.cluster_key_file
        )  # ...and a process
        try:
            await wait_ready(port, proc)
            root = await ok(
                c,
                "POST",
                "pki/root/generate/internal",
                {"common_name": "Root", "key_type": "ec", "ttl": "8760h"},
            )
            issuer = x509.load_pem_x509_certificate(root["data"]["certificate"].encode())
            await ok(
                c,
                "POST",
                "pki/roles/web",
                {
                    "allowed_domains": "example.com",
                    "allow_subdomains": True,
                    "no_store": True,
                    "key_type": "rsa",
                    "ttl": "1h",
                },
            )
            done = 0
            some_done = asyncio.Event()
            results: list[tuple[int, Any, str]] = []
            gate = asyncio.Semaphore(6)

            async def issue(i: int) -> None:
                nonlocal done
                cn = f"h{i}.example.com"
                async with gate:
                    status, body = await c.request(
                        "POST", "/v1/pki/issue/web", json={"common_name": cn}
                    )
                results.append((status, body, cn))
                done += 1
                if done >= 5:
                    some_done.set()

            tasks = [asyncio.create_task(issue(i)) for i in range(24)]
            await some_done.wait()
            proc.send_signal(signal.SIGKILL)  # mid-load: some of its requests are in flight
            killed_at = done
            await asyncio.gather(*tasks)
            assert killed_at < 24
            good = [(body, cn) for status, body, cn in results if status == 200]
            others = [(status, body) for status, body, _ in results if status != 200]
            assert all(status in (503, 504) for status, _ in others), others
            assert len(good) >= 20, others
            for body, cn in good:
                check_issued(body["data"], cn, issuer)
            after = await ok(c, "POST", "pki/issue/web", {"common_name": "late.example.com"})
            check_issued(after["data"], "late.example.com", issuer)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)
