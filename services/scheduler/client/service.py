"""`trellis run client`: one client agent (or `--simulate N` mock nodes) as a service."""

from __future__ import annotations

import os

from services.scheduler.client.agent import ClientAgent, run_client
from shared.bus import Bus
from shared.settings import Settings


class ClientService:
    name = "client"

    def __init__(
        self, bus: Bus, settings: Settings, *, simulate: int = 0, datacenter: str = "dc1"
    ) -> None:
        self.bus = bus
        self.settings = settings
        self.simulate = simulate
        self.datacenter = datacenter
        self.agent: ClientAgent | None = None

    @property
    def ready(self) -> bool:
        return self.agent is not None and bool(self.agent.ready)

    async def start(self) -> None:
        # A real node keeps its identity and task dirs in <data_dir>/client; without a data dir
        # it is a new node each start (as `nomad agent -dev`).
        data = self.settings.data_dir
        self.agent = await run_client(
            self.bus,
            self.settings,
            datacenter=self.datacenter,
            simulate=self.simulate,
            data_dir=os.path.join(data, "client") if data and not self.simulate else "",
        )

    async def stop(self) -> None:
        if self.agent is not None:
            await self.agent.stop()
