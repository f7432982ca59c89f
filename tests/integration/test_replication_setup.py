"""Two-cluster DR set-ups shared by the replication tests, the failover drill and the benchmark
(no tests here). Each site has its own nats-server, a gateway, a secrets replica and an
in-process replication service, as two separate data centres would."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from services.gateway.main import Gateway
from services.replication import otp
from services.replication.service import ReplicationService
from services.secrets.service import SecretsService
from shared.bus import Bus
from shared.settings import Settings
from tests.conftest import start_nats
from tests.harness import Cluster, start_cluster

DR = "/v1/sys/replication/dr/"


@dataclass
class Site:
    store: str
    nats: subprocess.Popen[bytes]
    nats_url: str
    cluster: Cluster
    repl: ReplicationService | None = None
    repl_bus: Bus | None = None
    keys: list[str] = field(default_factory=list)  # unseal key shares it was made with

    @property
    def settings(self) -> Settings:
        return self.cluster.settings

    async def req(self, method: str, path: str, **kw: Any) -> tuple[int, Any]:
        return await self.cluster.request(method, path, **kw)

    async def status(self) -> dict[str, Any]:
        code, body = await self.req("GET", DR + "status", token="")
        assert code == 200, body
        return body["data"]


async def start_replication(site: Site) -> ReplicationService:
    bus = await Bus.connect(site.nats_url, name="test-replication")
    svc = ReplicationService(bus, site.settings)
    await svc.start()
    site.repl, site.repl_bus = svc, bus
    return svc


async def stop_replication(site: Site) -> None:
    if site.repl is not None:
        with contextlib.suppress(Exception):
            await site.repl.stop()
    if site.repl_bus is not None:
        with contextlib.suppress(Exception):
            await site.repl_bus.close()
    site.repl = site.repl_bus = None


async def start_site(*, shares: int = 1, threshold: int = 1, replication: bool = True) -> Site:
    store = tempfile.mkdtemp(prefix="trellis-dr-")
    proc, url, _ = start_nats(store)
    cluster = await start_cluster(
        url, shares=shares, threshold=threshold, cluster_addr="127.0.0.1:0"
    )
    # The address the activation token carries (the gateway picked a free port).
    cluster.settings.api_addr = cluster.secrets_url
    site = Site(store, proc, url, cluster, keys=list(cluster.unseal_keys))
    if replication:
        await start_replication(site)
    return site


async def stop_services(site: Site) -> None:
    """Every Trellis process of the site stops; its NATS (and data) stays."""
    await stop_replication(site)
    await site.cluster.close()


async def crash_services(site: Site) -> None:
    """Every Trellis process of the site dies at once: connections drop, nothing drains."""
    for bus in [site.repl_bus, *site.cluster.buses]:
        if bus is not None:
            with contextlib.suppress(Exception):
                await _close_dead(bus)
    # A dead gateway does not wait for requests in flight (they would wait for their timeout).
    for runner in site.cluster.gateway.runners:
        runner._shutdown_timeout = 0.1
    await stop_services(site)


async def _close_dead(bus: Bus) -> None:
    """Close a connection whose server is gone. nats-py's close() then cancels the reconnect
    attempt under way and may raise that attempt's CancelledError: swallowed, unless this
    task is the one being cancelled."""
    try:
        await bus.nc.close()
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise


def kill_nats(site: Site) -> None:
    site.nats.kill()
    site.nats.wait(10)


def restart_nats(site: Site) -> None:
    port = int(site.nats_url.rsplit(":", 1)[1])
    site.nats, site.nats_url, _ = start_nats(site.store, port=port)


async def restart_services(site: Site) -> None:
    """The site's processes come back on the same data (same cluster name, new ports)."""
    settings = msgspec.structs.replace(
        site.settings, nats_url=site.nats_url, secrets_addr="127.0.0.1:0"
    )
    gw_bus = await Bus.connect(site.nats_url, name="test-gateway")
    gateway = Gateway(gw_bus, settings)
    await gateway.start()
    settings.api_addr = gateway.addresses["secrets"]
    cluster = Cluster(
        settings=settings,
        gateway=gateway,
        buses=[gw_bus],
        root_token=site.cluster.root_token,
        unseal_keys=site.keys,
    )
    bus = await Bus.connect(site.nats_url, name="test-secrets")
    svc = SecretsService(bus, settings)
    await svc.start()
    cluster.buses.append(bus)
    cluster.secrets.append(svc)
    site.cluster = cluster
    await start_replication(site)


async def close_site(site: Site) -> None:
    await stop_services(site)
    with contextlib.suppress(Exception):
        kill_nats(site)
    shutil.rmtree(site.store, ignore_errors=True)


async def wait_until(
    check: Callable[[], Awaitable[Any]], *, within: float = 10.0, what: str = "condition"
) -> Any:
    """Poll `check` until it returns something truthy; fail after `within` seconds."""
    deadline = time.monotonic() + within
    last: Any = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {within}s waiting for {what}; last: {last!r}")


async def unseal(site: Site, keys: list[str]) -> None:
    for key in keys:
        code, body = await site.req("POST", "/v1/sys/unseal", json={"key": key}, token="")
        assert code == 200, body
    code, body = await site.req("GET", "/v1/sys/seal-status", token="")
    assert body["sealed"] is False, body


async def enable_primary(site: Site) -> None:
    code, body = await site.req("POST", DR + "primary/enable", json={})
    assert code in (200, 204), body


async def secondary_token(primary: Site, sid: str | None = None, **extra: Any) -> str:
    code, body = await primary.req(
        "POST", DR + "primary/secondary-token", json={"id": sid or uuid.uuid4().hex[:8], **extra}
    )
    assert code == 200, body
    return body["wrap_info"]["token"] if body.get("wrap_info") else body["data"]["token"]


async def enable_secondary(secondary: Site, token: str, **extra: Any) -> tuple[int, Any]:
    return await secondary.req("POST", DR + "secondary/enable", json={"token": token, **extra})


async def pair(primary: Site, secondary: Site) -> None:
    """The three calls: enable primary, secondary-token, secondary enable; then wait for sync."""
    await enable_primary(primary)
    token = await secondary_token(primary, "dr1")
    code, body = await enable_secondary(secondary, token)
    assert code == 200, body
    await caught_up(primary, secondary)


async def caught_up(primary: Site, secondary: Site, within: float = 10.0) -> dict[str, Any]:
    """Both sides agree: same merkle_root, last_remote_wal at the primary's last_wal."""

    async def same() -> dict[str, Any] | None:
        p, s = await primary.status(), await secondary.status()
        ok = (
            s.get("state") == "stream-wals"
            and p["merkle_root"] == s["merkle_root"]
            and s["last_remote_wal"] == p["last_wal"]
        )
        return s if ok else None

    return await wait_until(same, within=within, what="the secondary to catch up")


async def operation_token(secondary: Site, keys: list[str]) -> str:
    """Generate a DR operation token on `secondary` from the primary's key shares."""
    code, att = await secondary.req(
        "POST", DR + "secondary/generate-operation-token/attempt", json={}, token=""
    )
    assert code == 200, att
    body: dict[str, Any] = {}
    for key in keys[: att["required"]]:
        code, body = await secondary.req(
            "POST",
            DR + "secondary/generate-operation-token/update",
            json={"key": key, "nonce": att["nonce"]},
            token="",
        )
        assert code == 200, body
    assert body["complete"] is True, body
    return otp.decode(body["encoded_token"], att["otp"])
