"""deploy/nats/secure.conf: each service works under its own NATS user, and the permissions keep
the gateway out of seal traffic and away from the crypto workers."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import aiohttp
import nats
import pytest

from services.crypto.service import CryptoService
from services.gateway.main import Gateway
from services.secrets.service import SecretsService
from shared.bus import Bus
from shared.nats_permissions import USERS
from shared.runner import nats_options
from shared.settings import Settings
from tests.conftest import free_port
from tests.harness import ephemeral_cluster_key
from tests.nats_sync import subscribed

pytestmark = pytest.mark.nats

ROOT = Path(__file__).resolve().parents[2]


def _start_secure_nats(tmp: str) -> tuple[subprocess.Popen[bytes], int]:
    """nats-server with deploy/nats/secure.conf, a password per service from the environment."""
    env = {**os.environ, **{f"TRELLIS_NATS_{u.upper()}_PASSWORD": f"pw-{u}" for u in USERS}}
    port = free_port()
    log_path = Path(tmp) / "nats.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                shutil.which("nats-server") or "nats-server",
                "-c",
                f"{tmp}/secure.conf",
                "-a",
                "127.0.0.1",
                "-p",
                str(port),
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 20
    while "Server is ready" not in log_path.read_text(errors="replace"):
        assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()
        time.sleep(0.05)
    return proc, port


async def test_secure_config_permissions() -> None:
    tmp = tempfile.mkdtemp(prefix="trellis-secure-")
    conf = (ROOT / "deploy/nats/secure.conf").read_text().replace("./data/secure", f"{tmp}/js")
    (Path(tmp) / "secure.conf").write_text(conf)
    proc, port = _start_secure_nats(tmp)
    url = f"nats://127.0.0.1:{port}"
    buses: list[Bus] = []
    services: list[object] = []
    key_file = str(ephemeral_cluster_key())
    try:

        def settings(user: str) -> Settings:
            return Settings(
                nats_url=url,
                nats_user=user,
                nats_password=f"pw-{user}",
                secrets_addr="127.0.0.1:0",
                workspace_addr="127.0.0.1:0",
                scheduler_addr="127.0.0.1:0",
                log_json=False,
                cluster_key_file=key_file,
            )

        async def bus(user: str) -> Bus:
            b = await Bus.connect(url, user, **nats_options(settings(user)))
            buses.append(b)
            return b

        secrets = SecretsService(await bus("secrets"), settings("secrets"))
        await secrets.start()
        crypto = CryptoService(await bus("crypto"), settings("crypto"))
        await crypto.start()
        gateway = Gateway(await bus("gateway"), settings("gateway"))
        await gateway.start()
        services += [secrets, crypto, gateway]
        base = gateway.addresses["secrets"]
        async with aiohttp.ClientSession() as s:
            async with s.post(
                base + "/v1/sys/init", json={"secret_shares": 1, "secret_threshold": 1}
            ) as r:
                init = await r.json()
                assert r.status == 200, init
            async with s.post(base + "/v1/sys/unseal", json={"key": init["keys"][0]}) as r:
                assert (await r.json())["sealed"] is False
            hdr = {"X-Vault-Token": init["root_token"]}
            async with s.post(
                base + "/v1/secret/data/x", headers=hdr, json={"data": {"a": "b"}}
            ) as r:
                assert r.status == 200
            async with s.get(base + "/v1/secret/data/x", headers=hdr) as r:
                assert (await r.json())["data"]["data"] == {"a": "b"}

        # The gateway's user may not listen to unseal shares nor talk to crypto workers.
        errors: list[str] = []

        async def on_error(e: Exception) -> None:
            errors.append(str(e))

        spy = await nats.connect(url, user="gateway", password="pw-gateway", error_cb=on_error)
        try:
            await spy.subscribe("trellis.secrets.seal.share")
            await spy.publish("trellis.crypto.cmd", b"x")
            await subscribed(spy)  # the server has read both (and refused them) by now
            for _ in range(100):
                if len(errors) >= 2:
                    break
                await asyncio.sleep(0.02)
        finally:
            await spy.close()
        assert sum("ermissions" in e for e in errors) >= 2, errors
        with pytest.raises(nats.errors.Error):
            await nats.connect(
                url,
                user="gateway",
                password="wrong",
                max_reconnect_attempts=0,
                allow_reconnect=False,
            )
    finally:
        for svc in reversed(services):
            await svc.stop()  # type: ignore[attr-defined]
        for b in buses:
            await b.close()
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)
