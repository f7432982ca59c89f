"""HTTP methods beyond the standard ones (Vault's `LIST`, which hvac sends).

aiohttp's C parser (llhttp) only knows the registered methods and answers `LIST` with 400. The
pure-Python parser accepts any RFC 9110 token, so the secrets listener builds its connections
with that one. Scoped to the runner that asks for it; the other listeners keep the C parser.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web, web_protocol
from aiohttp.http_parser import HttpRequestParserPy
from aiohttp.web_server import Server


class _AnyMethodServer(Server):
    def __call__(self) -> web_protocol.RequestHandler:
        original = web_protocol.HttpRequestParser
        web_protocol.HttpRequestParser = HttpRequestParserPy  # type: ignore[misc]
        try:
            return super().__call__()
        finally:
            web_protocol.HttpRequestParser = original  # type: ignore[misc]


class AnyMethodAppRunner(web.AppRunner):
    """An AppRunner whose connections accept any method token."""

    async def _make_server(self) -> Server:
        server = await super()._make_server()
        server.__class__ = _AnyMethodServer
        return server


def runner_for(app: web.Application, any_method: bool, **kwargs: Any) -> web.AppRunner:
    cls = AnyMethodAppRunner if any_method else web.AppRunner
    return cls(app, **kwargs)
