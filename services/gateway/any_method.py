"""Request lines beyond the ordinary: any method token, `OPTIONS *`, `CONNECT`, `TRACE`, and
request lines the HTTP parser refuses. Never a 500, always the API's own error shape.

- Every listener parses with llhttp, aiohttp's C parser, and hands a connection to the
  pure-Python parser at the first message llhttp refuses (services/gateway/http_parser.py): the
  Python parser accepts any RFC 9110 method token (Vault's `LIST`, which hvac sends, and methods
  nobody knows), which llhttp answers with its own 400 before any handler runs.
- The listener's handler (services/gateway/app.py) has `OddRequests` answer what no service
  should see: `OPTIONS *` is 200 (as Go's net/http, and so OpenBao and Nomad, answers it);
  `CONNECT` and `TRACE` (which would echo credentials back) and methods the API does not use
  are 405 with `Allow`. The secrets listener words them as OpenBao does (404 for a target that
  is not a path, 405 otherwise).
- A request handler words the parser's own refusals (a bad request line, a bad header) in the
  API's error shape, without quoting the request back.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from aiohttp import web, web_protocol
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.http_parser import RawRequestMessage
from aiohttp.streams import StreamReader
from aiohttp.web_request import BaseRequest
from aiohttp.web_server import Server

from services.gateway.apis import ApiSpec, ErrorFormatter
from services.gateway.fast_lane import FastHandler, FastLane, supported
from services.gateway.http_parser import SwitchingParser

if TYPE_CHECKING:
    from services.gateway.app import Listener

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


class OddRequests:
    """Answers, for `api`'s listener, the requests whose method is not in `allowed` or whose
    target is `*`."""

    def __init__(self, api: ApiSpec) -> None:
        self.allowed = frozenset(allowed_methods(api))
        self._allow = ", ".join(allowed_methods(api))
        self._secrets = api.name == "secrets"
        self._format_error = api.format_error

    def __call__(self, request: BaseRequest) -> web.Response:
        method = request.method
        allow = self._allow
        if method == "OPTIONS":
            return web.Response(status=200, headers={"Allow": allow})
        shown = method[:32]
        if self._secrets and not request.raw_path.startswith("/"):
            # `CONNECT host:port`: OpenBao answers 404, there being no such path.
            resp = _respond(self._format_error, 404, f"{shown}: the request target must be a path")
        else:
            resp = _respond(
                self._format_error,
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


class _Handler(FastHandler):
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


# Checked once: another aiohttp may lack what the fast lane relies on.
_FAST = supported()


class _Server(Server):
    def __init__(
        self, handler: Any, format_error: ErrorFormatter, fast: FastLane | None, **kwargs: Any
    ) -> None:
        super().__init__(handler, **kwargs)
        self.format_error = format_error
        self.fast = fast if _FAST else None

    def __call__(self) -> web_protocol.RequestHandler:
        original = web_protocol.HttpRequestParser
        web_protocol.HttpRequestParser = SwitchingParser  # type: ignore[misc]
        try:
            handler = _Handler(self, loop=self._loop, **self._kwargs)
        finally:
            web_protocol.HttpRequestParser = original  # type: ignore[misc]
        handler.format_error = self.format_error
        # The lane writes no access log: a listener that keeps one goes aiohttp's way.
        handler.fast_lane = None if handler._logging_enabled else self.fast
        return handler


def runner_for(
    listener: Listener,
    api: ApiSpec,
    *,
    shutdown_timeout: float = 60.0,
    handler_cancellation: bool = False,
    **kwargs: Any,
) -> web.ServerRunner:
    """The runner for `api`'s listener: aiohttp's low-level server (no application, router or
    middlewares) with the listener's one handler, any method token, odd request lines answered.
    `kwargs` go to each connection's protocol (e.g. access_log)."""
    loop = asyncio.get_running_loop()
    limit = listener.max_body

    def make_request(
        message: RawRequestMessage,
        payload: StreamReader,
        protocol: web_protocol.RequestHandler,
        writer: AbstractStreamWriter,
        task: asyncio.Task[None],
    ) -> BaseRequest:
        return BaseRequest(message, payload, protocol, writer, task, loop, client_max_size=limit)

    server = _Server(
        listener.handle,
        api.format_error,
        listener.fast,
        request_factory=make_request,
        handler_cancellation=handler_cancellation,
        loop=loop,
        **kwargs,
    )
    return web.ServerRunner(server, shutdown_timeout=shutdown_timeout)
