"""The gateway process: three listeners on one bus connection."""

from __future__ import annotations

import contextlib

import structlog
from aiohttp import web

from services.gateway.any_method import runner_for
from services.gateway.apis import SCHEDULER, SECRETS, WORKSPACE
from services.gateway.app import create_app
from shared.bus import Bus
from shared.settings import Settings

log = structlog.get_logger("gateway")


def split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host or "0.0.0.0", int(port)


class Gateway:
    """Owns the aiohttp runners; `ready` flips off before shutdown so probes drain traffic."""

    name = "gateway"

    def __init__(self, bus: Bus, settings: Settings) -> None:
        self.bus = bus
        self.settings = settings
        self.state = {"ready": False}
        self.runners: list[web.AppRunner] = []
        self.addresses: dict[str, str] = {}

    @property
    def ready(self) -> bool:
        return self.state["ready"]

    async def start(self) -> None:
        for api, addr in (
            (SECRETS, self.settings.secrets_addr),
            (WORKSPACE, self.settings.workspace_addr),
            (SCHEDULER, self.settings.scheduler_addr),
        ):
            app = create_app(api, self.bus, self.settings, self.state)
            runner = runner_for(app, api is SECRETS, access_log=None, shutdown_timeout=20)
            await runner.setup()
            host, port = split_addr(addr)
            site = web.TCPSite(runner, host, port, reuse_address=True)
            await site.start()
            self.runners.append(runner)
            # Port 0 picks a free port: report the real one.
            sock = site._server.sockets[0]  # type: ignore[union-attr]
            real_host, real_port = sock.getsockname()[:2]
            self.addresses[api.name] = f"http://{real_host}:{real_port}"
            log.info("listening", api=api.name, addr=self.addresses[api.name])
        self.state["ready"] = True

    async def stop(self) -> None:
        self.state["ready"] = False
        for runner in self.runners:
            with contextlib.suppress(Exception):
                await runner.cleanup()
