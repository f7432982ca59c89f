"""In-process Trellis clusters for integration tests: a gateway and service replicas on the
session's real nats-server, each cluster under its own unique name."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from services.gateway.main import Gateway
from services.secrets.service import SecretsService
from shared.bus import Bus
from shared.cluster_identity import new_cluster_key
from shared.settings import Settings


@dataclass
class Cluster:
    settings: Settings
    gateway: Gateway
    secrets: list[SecretsService] = field(default_factory=list)
    buses: list[Bus] = field(default_factory=list)
    extra: list[Any] = field(default_factory=list)
    root_token: str = ""
    unseal_keys: list[str] = field(default_factory=list)

    @property
    def secrets_url(self) -> str:
        return self.gateway.addresses["secrets"]

    @property
    def workspace_url(self) -> str:
        return self.gateway.addresses["workspace"]

    @property
    def scheduler_url(self) -> str:
        return self.gateway.addresses["scheduler"]

    async def add_secrets_replica(self) -> SecretsService:
        bus = await Bus.connect(self.settings.nats_url, name="test-secrets")
        svc = SecretsService(bus, self.settings)
        await svc.start()
        self.buses.append(bus)
        self.secrets.append(svc)
        return svc

    async def stop_secrets_replica(self, svc: SecretsService) -> None:
        idx = self.secrets.index(svc)
        await svc.stop()
        await self.buses[idx + 1].close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        token: str | None = None,
        json: Any = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        hdrs = dict(headers or {})
        tok = self.root_token if token is None else token
        if tok:
            hdrs["X-Svc-Token"] = tok
        async with (
            aiohttp.ClientSession() as s,
            s.request(method, self.secrets_url + path, json=json, headers=hdrs) as r,
        ):
            text = await r.text()
            try:
                body = await r.json(content_type=None) if text else None
            except ValueError:
                body = text
            return r.status, body

    async def close(self) -> None:
        for svc in self.extra:
            with contextlib.suppress(Exception):
                await svc.stop()
        for svc in self.secrets:
            with contextlib.suppress(Exception):
                await svc.stop()
        with contextlib.suppress(Exception):
            await self.gateway.stop()
        for bus in self.buses:
            with contextlib.suppress(Exception):
                await bus.close()


def ephemeral_cluster_key() -> Path:
    """A fresh secrets cluster key per test cluster, in a private temp dir (0600)."""
    folder = Path(tempfile.mkdtemp(prefix="trellis-key-"))
    new_cluster_key(folder / "cluster.key")
    return folder / "cluster.key"


async def start_cluster(
    nats_url: str,
    *,
    replicas: int = 1,
    initialize: bool = True,
    shares: int = 1,
    threshold: int = 1,
    **overrides: Any,
) -> Cluster:
    settings = Settings(
        nats_url=nats_url,
        cluster_name="c" + uuid.uuid4().hex[:10],
        cluster_key_file=str(ephemeral_cluster_key()),
        secrets_addr="127.0.0.1:0",
        workspace_addr="127.0.0.1:0",
        scheduler_addr="127.0.0.1:0",
        log_json=False,
        **overrides,
    )
    gw_bus = await Bus.connect(nats_url, name="test-gateway")
    gateway = Gateway(gw_bus, settings)
    await gateway.start()
    cluster = Cluster(settings=settings, gateway=gateway, buses=[gw_bus])
    for _ in range(replicas):
        await cluster.add_secrets_replica()
    if initialize:
        status, body = await cluster.request(
            "POST",
            "/v1/sys/init",
            token="",
            json={"secret_shares": shares, "secret_threshold": threshold},
        )
        assert status == 200, body
        cluster.root_token = body["root_token"]
        cluster.unseal_keys = body["keys"]
        for key in body["keys"][:threshold]:
            status, body = await cluster.request("POST", "/v1/sys/unseal", json={"key": key})
            assert status == 200, body
        assert body["sealed"] is False
        # Every replica is unsealed by the broadcast; wait until each one serves.
        deadline = asyncio.get_running_loop().time() + 15
        while any(s.core is None or s.core.sealed for s in cluster.secrets):
            assert asyncio.get_running_loop().time() < deadline, "a replica stayed sealed"
            await asyncio.sleep(0.02)
    return cluster
