"""`trellis run client`: one client agent (or `--simulate N` mock nodes) as a service."""

from __future__ import annotations

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
        self.agent = await run_client(
            self.bus, self.settings, datacenter=self.datacenter, simulate=self.simulate
        )

    async def stop(self) -> None:
        if self.agent is not None:
            await self.agent.stop()
