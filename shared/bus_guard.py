"""Refuse to run on a bus that admits anyone: before a service connects with its own
credentials, it tries to connect with none. If NATS lets that anonymous client in, every secret
on the bus is one subscription away, so the service stops unless told `--insecure-bus`."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import nats

from shared.settings import Settings

PROBE_TIMEOUT = 3.0


async def admits_anonymous(url: str, tls: Any = None) -> bool:
    """True when a client without credentials gets a connection (it is closed at once)."""
    errors: list[Exception] = []

    async def on_error(exc: Exception) -> None:
        errors.append(exc)

    options: dict[str, Any] = {"tls": tls} if tls is not None else {}
    try:
        nc = await asyncio.wait_for(
            nats.connect(
                servers=[u.strip() for u in url.split(",")],
                allow_reconnect=False,
                max_reconnect_attempts=0,
                connect_timeout=PROBE_TIMEOUT,
                error_cb=on_error,
                **options,
            ),
            PROBE_TIMEOUT * 2,
        )
    except Exception:
        return False  # refused (or unreachable: the real connect reports that)
    try:
        # An authorization violation can arrive just after CONNECT: a round trip settles it.
        await nc.flush(timeout=PROBE_TIMEOUT)
        return nc.is_connected
    except Exception:
        return False
    finally:
        with contextlib.suppress(Exception):
            await nc.close()


def open_bus_message(url: str) -> str:
    return (
        f"the NATS at {url} admits clients without credentials: anyone who reaches it can read "
        "and command the cluster. Configure NATS authorization (deploy/nats/secure.conf) and "
        "this service's credentials, or pass --insecure-bus for a throwaway cluster."
    )


async def require_closed_bus(settings: Settings, tls: Any = None) -> None:
    """SystemExit unless the bus refuses anonymous clients or `insecure_bus` is set."""
    if settings.insecure_bus:
        return
    if await admits_anonymous(settings.nats_url, tls):
        raise SystemExit(open_bus_message(settings.nats_url))
