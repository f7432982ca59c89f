"""Runs one service in this process: logging, the bus, the health server, signals, and a clean
stop (stop intake, finish in-flight work, drain)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import signal
import ssl
from typing import Any, Protocol

import structlog

from shared.bus import Bus
from shared.health import start_health_server
from shared.logging import configure_logging
from shared.settings import Settings

log = structlog.get_logger("runner")

# service name -> "module:Class"; each class takes (bus, settings) and has start/stop/ready.
SERVICES: dict[str, str] = {
    "gateway": "services.gateway.main:Gateway",
    "secrets": "services.secrets.service:SecretsService",
    "crypto": "services.crypto.service:CryptoService",
    "replication": "services.replication.service:ReplicationService",
    "workspace": "services.workspace.service:WorkspaceService",
    "scheduler": "services.scheduler.service:SchedulerService",
    "client": "services.scheduler.client.service:ClientService",
}


def nats_options(settings: Settings) -> dict[str, Any]:
    """Credentials and TLS for this service's NATS connection, from its settings."""
    options: dict[str, Any] = {}
    if settings.nats_user:
        options.update(user=settings.nats_user, password=settings.nats_password)
    if settings.nats_tls_ca or settings.nats_tls_cert:
        ctx = ssl.create_default_context(cafile=settings.nats_tls_ca or None)
        if settings.nats_tls_cert:
            ctx.load_cert_chain(settings.nats_tls_cert, settings.nats_tls_key or None)
        options["tls"] = ctx
    return options


class Service(Protocol):
    @property
    def ready(self) -> bool: ...
    async def start(self) -> None: ...
    async def stop(self) -> None: ...


def service_class(name: str) -> Any:
    ref = SERVICES.get(name)
    if ref is None:
        raise SystemExit(f"unknown service {name!r}; choose one of {', '.join(SERVICES)}")
    module, _, attr = ref.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise SystemExit(f"service {name!r} is not available in this build: {exc}") from None


async def run_service(
    name: str, settings: Settings, *, health_addr: str = "", options: dict[str, Any] | None = None
) -> None:
    configure_logging(json=settings.log_json, level=settings.log_level)
    structlog.contextvars.bind_contextvars(service=name)
    cls = service_class(name)
    bus = await Bus.connect(settings.nats_url, name=f"trellis-{name}", **nats_options(settings))
    svc: Service = cls(bus, settings, **(options or {}))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    health = await start_health_server(health_addr, lambda: svc.ready) if health_addr else None
    try:
        await svc.start()
        log.info("started", service=name)
        await stop.wait()
    finally:
        log.info("stopping", service=name)
        with contextlib.suppress(Exception):
            await svc.stop()
        await bus.close()
        if health is not None:
            await health.cleanup()
