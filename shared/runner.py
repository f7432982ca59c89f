"""Runs one service in this process: logging, the bus, the health server, signals, and a clean
stop (stop intake, finish in-flight work, drain)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import signal
import ssl
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, Protocol, TypeVar

import structlog

from shared.bus import Bus
from shared.health import start_health_server
from shared.logging import configure_logging
from shared.service_table import SERVICES
from shared.settings import Settings
from shared.start_gate import GATE_ENV, wait_at_gate

log = structlog.get_logger("runner")

T = TypeVar("T")


def nats_options(settings: Settings) -> dict[str, Any]:
    """Credentials and TLS for this service's NATS connection, from its settings."""
    options: dict[str, Any] = {}
    if settings.nats_credentials_file:
        # A 0600 file, so the password is not in the environment (services/dev_nats.py).
        creds = json.loads(Path(settings.nats_credentials_file).read_text())
        options.update(user=creds["user"], password=creds["password"])
    elif settings.nats_user:
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


def pass_start_gate(name: str) -> None:
    """Under `trellis dev`'s start gate (shared/start_gate.py): import the service while the gate
    is shut, then wait to be let go; without a gate, nothing."""
    if os.environ.get(GATE_ENV):
        service_class(name)
        wait_at_gate()


# SIGTERM to exit: inside `trellis dev`/`server`'s stop timeout and Kubernetes' 30 s grace.
STOP_TIMEOUT = 20.0


async def _unless_stopped(work: Awaitable[T], stop: asyncio.Event) -> tuple[bool, T | None]:
    """Run `work` unless a stop signal comes first (then cancel it): (finished, result)."""
    task = asyncio.ensure_future(work)
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if task.done():
        return True, task.result()
    task.cancel()
    with contextlib.suppress(BaseException):
        await task
    return False, None


async def run_service(
    name: str, settings: Settings, *, health_addr: str = "", options: dict[str, Any] | None = None
) -> None:
    """Serve until SIGTERM or SIGINT, then stop intake, drain in-flight work and exit 0 within
    STOP_TIMEOUT; a second signal exits at once. The handlers are installed first, so a signal
    during start-up is honoured too, and as PID 1 (the kernel drops a signal PID 1 has no
    handler for)."""
    configure_logging(json=settings.log_json, level=settings.log_level)
    structlog.contextvars.bind_contextvars(service=name)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal(sig: signal.Signals) -> None:
        if stop.is_set():
            log.warning("second signal: exiting without draining", signal=sig.name)
            os._exit(1)
        log.info("stop requested", signal=sig.name)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, on_signal, sig)
    cls = service_class(name)
    connected, bus = await _unless_stopped(
        Bus.connect(settings.nats_url, name=f"trellis-{name}", **nats_options(settings)), stop
    )
    if not connected or bus is None:
        return
    svc: Service = cls(bus, settings, **(options or {}))

    def ready() -> bool:
        return svc.ready and bus.nc.is_connected and not stop.is_set()

    detail = getattr(svc, "health_detail", None)
    health = await start_health_server(health_addr, ready, detail) if health_addr else None
    try:
        started, _ = await _unless_stopped(svc.start(), stop)
        if started:
            log.info("started", service=name)
            await stop.wait()
    finally:
        log.info("stopping", service=name)
        deadline = loop.time() + STOP_TIMEOUT
        with contextlib.suppress(Exception):
            await asyncio.wait_for(svc.stop(), max(1.0, deadline - loop.time() - 3))
        with contextlib.suppress(Exception):
            await asyncio.wait_for(bus.close(), max(1.0, deadline - loop.time()))
        if health is not None:
            await health.cleanup()
        log.info("stopped", service=name)
