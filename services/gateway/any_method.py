"""Request lines beyond the ordinary: any method token, `OPTIONS *`, `CONNECT`, `TRACE`, and
request lines the HTTP parser refuses. Never a 500, always the API's own error shape.

- Every listener parses with llhttp, aiohttp's C parser, and hands a connection to the
  pure-Python parser at the first message llhttp refuses (services/gateway/http_parser.py): the
  Python parser accepts any RFC 9110 method token (Vault's `LIST`, which hvac sends, and methods
  nobody knows), which llhttp answers with its own 400 before any handler runs.
- A middleware answers what no service should see: `OPTIONS *` is 200 (as Go's net/http, and so
  OpenBao and Nomad, answers it); `CONNECT` and `TRACE` (which would echo credentials back) and
  methods the API does not use are 405 with `Allow`. The secrets listener words them as OpenBao
  does (404 for a target that is not a path, 405 otherwise).
- A request handler words the parser's own refusals (a bad request line, a bad header) in the
  API's error shape, without quoting the request back.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web, web_protocol
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_request import BaseRequest
from aiohttp.web_server import Server

from services.gateway.apis import ApiSpec, ErrorFormatter
from services.gateway.http_parser import SwitchingParser

# The methods each API routes; anything else never leaves the gateway.
_ORDINARY = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
ALLOWED = {"secrets": (*_ORDINARY, "LIST")}


def allowed_methods(api: ApiSpec) -> tuple[str, ...]:
    return ALLOWED.get(api.name, _ORDINARY)


def _respond(
    fmt: ErrorFormatter, status: int, message: str, headers: dict[str, str] | None = None
) -> web.Response:
    body, ctype = fmt(status, message)
    return web.Response(
        status=status, body=body, headers={"Content-Type": ctype, **(headers or {})}
    )


def odd_requests(api: ApiSpec) -> Any:
    """The middleware for `api`'s listener."""
    allowed = frozenset(allowed_methods(api))
    allow = ", ".join(allowed_methods(api))
    secrets = api.name == "secrets"

    @web.middleware
    async def middleware(request: web.Request, handler: Any) -> web.StreamResponse:
        method = request.method
        target = request.raw_path
        if method in allowed and target != "*":
            return await handler(request)  # the ordinary case: one set lookup, one comparison
        if method == "OPTIONS":
            return web.Response(status=200, headers={"Allow": allow})
        shown = method[:32]
        if secrets and not target.startswith("/"):
            # `CONNECT host:port`: OpenBao answers 404, there being no such path.
            resp = _respond(api.format_error, 404, f"{shown}: the request target must be a path")
        else:
            resp = _respond(
                api.format_error,
                405,
                f"method {shown} is not allowed; this API accepts {allow}",
                {"Allow": allow},
            )
        if method == "CONNECT":
            # What follows a CONNECT is tunnel bytes, not HTTP: close right after the answer
            # instead of lingering to read a "body" that never ends.
            resp.force_close()
            if isinstance(request.protocol, _Handler):
                request.protocol.skip_lingering()
        return resp

    return middleware


_REASONS = {
    "BadHttpMethod": "invalid method token",
    "BadStatusLine": "invalid request line",
    "InvalidURLError": "invalid request target",
    "LineTooLong": "a line is too long",
    "InvalidHeader": "invalid header",
    "ContentLengthError": "invalid Content-Length",
    "TransferEncodingError": "invalid Transfer-Encoding",
    "ContentEncodingError": "invalid Content-Encoding",
    "DecompressSizeError": "the decompressed body is too large",
}


class _Handler(web_protocol.RequestHandler):
    """Words the parser's refusals in the API's error shape."""

    format_error: ErrorFormatter

    def skip_lingering(self) -> None:
        self._lingering_time = 0.0

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status >= 500 or not isinstance(exc, HttpProcessingError):
            return super().handle_error(request, status, exc, message)
        # Named by the kind of mistake: the parser's own message quotes the request, which an
        # error body has no business echoing.
        reason = _REASONS.get(type(exc).__name__, "malformed request")
        self.logger.debug("refused request from %s: %s", request.remote, reason)
        resp = _respond(self.format_error, status, f"malformed HTTP request: {reason}")
        resp.force_close()
        return resp


class _Server(Server):
    format_error: ErrorFormatter

    def __call__(self) -> web_protocol.RequestHandler:
        original = web_protocol.HttpRequestParser
        web_protocol.HttpRequestParser = SwitchingParser  # type: ignore[misc]
        try:
            handler = _Handler(self, loop=self._loop, **self._kwargs)
        finally:
            web_protocol.HttpRequestParser = original  # type: ignore[misc]
        handler.format_error = self.format_error
        return handler


class _AppRunner(web.AppRunner):
    def __init__(self, app: web.Application, api: ApiSpec, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self._api = api

    async def _make_server(self) -> Server:
        server = await super()._make_server()
        server.__class__ = _Server
        server.format_error = self._api.format_error  # type: ignore[attr-defined]
        return server


def runner_for(app: web.Application, api: ApiSpec, **kwargs: Any) -> web.AppRunner:
    """The runner for `api`'s listener: any method token, odd request lines answered."""
    app.middlewares.append(odd_requests(api))
    return _AppRunner(app, api, **kwargs)
