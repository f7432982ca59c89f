"""The small HTTP server every `trellis run` process serves for probes and scraping:
/healthz (the process is alive), /readyz (it can serve, with what the service adds about its
state, such as whether a secrets replica is sealed), /metrics (Prometheus)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest


async def start_health_server(
    addr: str,
    is_ready: Callable[[], bool],
    detail: Callable[[], dict[str, Any]] | None = None,
) -> web.AppRunner:
    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(_: web.Request) -> web.Response:
        ok = is_ready()
        body = {**(detail() if detail is not None else {}), "ready": ok}
        return web.json_response(body, status=200 if ok else 503)

    async def prometheus(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", prometheus)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    host, _, port = addr.rpartition(":")
    await web.TCPSite(runner, host or "0.0.0.0", int(port), reuse_address=True).start()
    return runner
