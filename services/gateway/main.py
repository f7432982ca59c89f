"""The gateway process: three listeners on one bus connection."""

from __future__ import annotations

import contextlib
import resource

import structlog
from aiohttp import web

from services.gateway import ui
from services.gateway.any_method import runner_for
from services.gateway.apis import SCHEDULER, SECRETS, WORKSPACE
from services.gateway.app import create_app
from services.gateway.local_status import LocalStatus
from services.gateway.readiness import NEEDS, needed_probes
from services.gateway.tls import server_context
from services.port_guard import split_addr
from shared.bus import Bus
from shared.cluster_identity import IdentityError, load_identity
from shared.settings import Settings

log = structlog.get_logger("gateway")


# Connections waiting to be accepted: a burst of clients (10,000 blocking queries opened
# together) must not overflow the default of 128 into SYN retries of a second or more.
BACKLOG = 4096


def raise_open_files() -> int:
    """Every held connection (a blocking query waits up to 10 minutes) is a descriptor: lift the
    soft limit to the hard one. Returns the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class Gateway:
    """Owns the aiohttp runners; `ready` flips off before shutdown so probes drain traffic."""

    name = "gateway"

    def __init__(self, bus: Bus, settings: Settings) -> None:
        self.bus = bus
        self.settings = settings
        self.state = {"ready": False}
        self.runners: list[web.BaseRunner] = []
        self.addresses: dict[str, str] = {}
        # Each listener's forwarding handler, so the console on any listener reaches all three.
        self.ui_proxies: dict[str, ui.Handler] = {}
        self.local_status: LocalStatus | None = None

    @property
    def ready(self) -> bool:
        return self.state["ready"]

    async def start(self) -> None:
        log.info("open file limit", nofile=raise_open_files())
        try:
            public = load_identity(self.settings).public_key
        except IdentityError:
            pass  # no pinned key, no secrets API (services/gateway/secure.py says why)
        else:
            self.local_status = LocalStatus(public, self.settings.cluster_name)
            await self.local_status.subscribe(self.bus)
        # Several gateway processes (`trellis dev --gateways`, `gateway_processes`) share each
        # port and the kernel spreads connections among them; one alone binds as it always did,
        # so a second one on its port fails with "address in use" (services/port_guard.py).
        share = self.settings.gateway_processes > 1
        # Probes of the services the listeners' APIs need beside their own, shared by them.
        needed = needed_probes(self.bus, self.settings)
        for api, addr in (
            (SECRETS, self.settings.secrets_addr),
            (WORKSPACE, self.settings.workspace_addr),
            (SCHEDULER, self.settings.scheduler_addr),
        ):
            local = self.local_status if api is SECRETS else None
            needs = tuple(needed[n] for n in NEEDS.get(api.name, ()))
            app = create_app(
                api, self.bus, self.settings, self.state, self.ui_proxies, local, needs
            )
            # A blocking query whose client went away stops waiting at once instead of holding
            # its connection's memory until its wait (up to 10 minutes) runs out.
            runner = runner_for(
                app,
                api,
                access_log=None,
                shutdown_timeout=20,
                handler_cancellation=api.blocking_queries,
            )
            await runner.setup()
            host, port = split_addr(addr)
            ssl_ctx = server_context(getattr(self.settings, f"{api.name}_tls"), api.name)
            site = web.TCPSite(
                runner,
                host,
                port,
                reuse_address=True,
                reuse_port=share,
                backlog=BACKLOG,
                ssl_context=ssl_ctx,
            )
            await site.start()
            self.runners.append(runner)
            # Port 0 picks a free port: report the real one.
            sock = site._server.sockets[0]  # type: ignore[union-attr]
            real_host, real_port = sock.getsockname()[:2]
            scheme = "https" if ssl_ctx else "http"
            self.addresses[api.name] = f"{scheme}://{real_host}:{real_port}"
            log.info("listening", api=api.name, addr=self.addresses[api.name])
        self.state["ready"] = True

    async def stop(self) -> None:
        self.state["ready"] = False
        for runner in self.runners:
            with contextlib.suppress(Exception):
                await runner.cleanup()
