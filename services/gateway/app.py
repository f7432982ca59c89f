"""One request handler per API listener: request ids, size limits, forwarding over the bus,
metrics, health and readiness, the console.

The listener is aiohttp's low-level server with this one handler, not an Application: the router
and the middleware chain were a fifth of the listener's own CPU for a forwarded request
(bench/gateway_http.py), and every request but a handful of fixed paths goes to the same place.
`_route` routes as aiohttp's router did. Requests it would forward whose body came whole skip
aiohttp's per-request machinery: services/gateway/fast_lane.py hands them to `serve_fast`."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog
from aiohttp import hdrs, web
from aiohttp.http_parser import RawRequestMessage
from aiohttp.web_request import BaseRequest
from aiohttp.web_urldispatcher import _default_expect_handler
from multidict import CIMultiDictProxy
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from yarl import URL

from services.gateway import metrics, streams, ui, written
from services.gateway.any_method import OddRequests
from services.gateway.apis import ApiSpec
from services.gateway.deadline import request_deadline
from services.gateway.fast_lane import Connection, FastLane
from services.gateway.local_status import LocalStatus
from services.gateway.readiness import ServiceProbe
from services.gateway.secure import Channel, service_channel
from services.gateway.tls import peer_certificates
from shared.bus import Bus
from shared.errors import NoResponders, ServiceError
from shared.logging import request_scope
from shared.messages import HttpRequest, HttpResponse
from shared.settings import Settings
from shared.subjects import ECHO

log = structlog.get_logger("gateway")

# Hop-by-hop and framing headers are the gateway's business, not the service's.
_DROP_IN = {"host", "connection", "content-length", "transfer-encoding", "keep-alive", "upgrade"}
_JSON = {"Content-Type": "application/json"}

# How long to keep re-sending a request nobody received (a replica restarting, a rollout).
NO_RESPONDER_GRACE = 5.0

REQUEST_ID = web.RequestKey("request_id", str) if hasattr(web, "RequestKey") else "request_id"
# Logged for a request whose client left before its answer (nginx's word for it).
CLIENT_GONE = 499
# Routed only for GET and HEAD (as aiohttp's add_get did); other methods there go to the API.
_GET = frozenset({"GET", "HEAD"})

Handler = Callable[[BaseRequest], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Listener:
    """What services/gateway/any_method.py's runner serves: the handler, the body limit and the
    fast lane for ordinary forwarded requests (None: every request through `handle`)."""

    handle: Handler
    max_body: int
    fast: FastLane | None = None


# Request ids: unique and cheap (uuid4 was 1-2% of a request's CPU), 32 hex digits as before: a
# random prefix per process and a counter.
_ids = itertools.count()
_id_prefix = os.urandom(10).hex()


def _new_ids() -> None:
    global _ids, _id_prefix
    _ids, _id_prefix = itertools.count(), os.urandom(10).hex()


os.register_at_fork(after_in_child=_new_ids)


def _text(value: str) -> str:
    """A header as text the bus can carry: aiohttp keeps bytes that are not UTF-8 as lone
    surrogates, which no encoder takes; each becomes U+FFFD (a token so mangled then matches
    nothing, as in OpenBao, which compares bytes)."""
    if value.isascii():
        return value
    return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def new_request_id() -> str:
    return f"{_id_prefix}{next(_ids):012x}"


def _error(api: ApiSpec, status: int, message: str, request_id: str) -> web.Response:
    body, ctype = api.format_error(status, message)
    return web.Response(
        status=status, body=body, headers={"Content-Type": ctype, "X-Request-Id": request_id}
    )


async def forward(
    bus: Bus,
    subject: str,
    env: HttpRequest,
    timeout: float,
    api: str,
    channel: Channel | None = None,
) -> HttpResponse:
    """Send the envelope (through `channel`, sealed end to end, where one is given); re-send
    while nobody is listening (it was never delivered, so this is safe even for writes), up to
    NO_RESPONDER_GRACE."""
    deadline = time.monotonic() + NO_RESPONDER_GRACE
    delay = 0.05
    while True:
        try:
            if channel is not None:
                return await channel.call(
                    env, timeout=timeout, request_id=env.request_id, caller="gateway"
                )
            return await bus.request(
                subject,
                env,
                HttpResponse,
                timeout=timeout,
                request_id=env.request_id,
                caller="gateway",
            )
        except NoResponders:
            if time.monotonic() + delay > deadline:
                raise
            metrics.BUS_RETRIES.labels(api).inc()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)


def create_app(
    api: ApiSpec,
    bus: Bus,
    settings: Settings,
    ready: dict[str, bool],
    ui_proxies: dict[str, ui.Handler] | None = None,
    local: LocalStatus | None = None,
    needs: tuple[ServiceProbe, ...] = (),
) -> Listener:
    """`local`: answers sys/health, sys/seal-status and sys/leader from published state;
    `needs`: probes of the other services this API needs, for its /readyz."""
    subject = api.subject.on(settings.cluster_name)
    echo_subject = ECHO.on(settings.cluster_name)
    # No API envelope crosses the bus in the clear (docs/bus-security.md).
    channel = service_channel(bus, settings, api.name, api.subject)
    limit = settings.max_request_bytes
    stats = metrics.stats_for(api.name)
    # Only a listener that asks for client certificates has any to forward.
    client_certs = bool(getattr(settings, f"{api.name}_tls").client_ca_file)
    required_header = api.request_header if settings.require_request_header else ()
    odd = OddRequests(api)
    fast_methods = odd.allowed - {"HEAD"}
    api_name = api.name

    # Whether the success lines (debug) are wanted is settled once, logging being configured
    # before the app is made: building each line only for the filter to drop it cost a read.
    debug = log.bind().is_enabled_for(logging.DEBUG)

    def opened(headers: CIMultiDictProxy[str]) -> str:
        """The request's id, bound to every line logged while serving it (the task is this
        request's own), and the request counted in flight."""
        rid = headers.get("X-Request-Id", "")
        if not rid or not rid.isascii():  # echoed in a header: it must be one
            rid = new_request_id()
        request_scope.set((rid, api_name))
        stats.in_flight += 1
        return rid

    def closed(method: str, url: URL, status: int, start: float) -> None:
        stats.in_flight -= 1
        elapsed = time.perf_counter() - start
        stats.done(method, status, elapsed)
        # The canonical line per request: failures always, successes at debug (volume).
        if status >= 400 or debug:
            emit = log.warning if status >= 500 else log.info if status >= 400 else log.debug
            ms = round(elapsed * 1000, 2)
            emit("request", method=method, path=url.path, status=status, ms=ms)

    async def handle(request: BaseRequest) -> web.StreamResponse:
        if request.headers.get(hdrs.EXPECT):
            # Before the request id and the metrics, as aiohttp's application answered it.
            await _default_expect_handler(request)  # type: ignore[arg-type]
            await request.writer.drain()
        rid = opened(request.headers)
        request[REQUEST_ID] = rid
        start = time.perf_counter()
        status = 500
        try:
            method = request.method
            if method in odd.allowed and request.raw_path != "*":
                resp = await _route(method, request.rel_url.path_safe)(request)
            else:
                resp = odd(request)
            status = resp.status
            resp.headers["X-Request-Id"] = rid
            return resp
        except web.HTTPRequestEntityTooLarge:
            status = 413
            return _error(api, 413, f"request body exceeds the limit of {limit} bytes", rid)
        except web.RequestPayloadError:
            # A chunked body that breaks off mid-way: the client's mistake, not a 500.
            status = 400
            return _error(api, 400, "malformed HTTP request: invalid request body", rid)
        except web.HTTPException as exc:
            # An answer raised on purpose (the console's redirect), not a failure.
            status = exc.status
            exc.headers["X-Request-Id"] = rid
            raise
        except asyncio.CancelledError:
            status = CLIENT_GONE
            raise
        except Exception:
            log.exception("gateway failure")
            return _error(api, 500, "internal error in the gateway", rid)
        finally:
            closed(request.method, request.rel_url, status, start)

    async def healthz(_: BaseRequest) -> web.Response:
        return web.json_response({"status": "ok"})

    async def probe_send(env: HttpRequest, timeout: float) -> HttpResponse:
        # No NO_RESPONDER_GRACE retries: a probe reports what it finds now.
        if channel is not None:
            return await channel.call(env, timeout=timeout, request_id="readyz", caller="gateway")
        return await bus.request(
            subject, env, HttpResponse, timeout=timeout, request_id="readyz", caller="gateway"
        )

    probe = ServiceProbe(api.name, probe_send)

    async def readyz(_: BaseRequest) -> web.Response:
        """Ready when this gateway serves, the service behind this listener answers, and so
        do the other services its API needs (each named, with what is wrong)."""
        serving = ready.get("ready", False) and bus.nc.is_connected
        if not serving:
            service: dict[str, object] = {"name": api.name, "ready": False}
            needed = [{"name": p.api, "ready": False} for p in needs]
        else:
            service, *needed = await asyncio.gather(probe.check(), *(p.check() for p in needs))
        ok = serving and all(bool(s["ready"]) for s in (service, *needed))
        body: dict[str, object] = {"ready": ok, "gateway": serving, "service": service}
        if needs:
            body["needs"] = needed
        return web.json_response(body, status=200 if ok else 503)

    async def prometheus(_: BaseRequest) -> web.Response:
        return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def echo(request: BaseRequest) -> web.Response:
        body = await request.read()
        env = HttpRequest(
            method=request.method, path=request.path, body=body, request_id=request[REQUEST_ID]
        )
        try:
            reply = await forward(bus, echo_subject, env, settings.request_timeout, api.name)
        except ServiceError as exc:
            return _error(api, exc.code, exc.message, request[REQUEST_ID])
        return web.Response(status=reply.status, body=reply.body, content_type="application/json")

    def failure(status: int, message: str) -> HttpResponse:
        """The gateway's own error answer, as a reply (its X-Request-Id is added on writing)."""
        body, ctype = api.format_error(status, message)
        return HttpResponse(status=status, body=body, headers={"Content-Type": ctype})

    def too_large() -> HttpResponse:
        return failure(413, f"request body exceeds the limit of {limit} bytes")

    def refusal(headers: CIMultiDictProxy[str], size: int | None) -> HttpResponse | None:
        """What refuses a request before its body is read (`size`: its length, where known)."""
        if size is not None and size > limit:
            return too_large()
        if required_header and not any(h in headers for h in required_header):
            return failure(412, "missing required request header X-Svc-Request")
        return None

    async def exchange(
        method: str,
        target: str,
        headers: CIMultiDictProxy[str],
        url: URL,
        body: bytes,
        remote: str,
        transport: asyncio.BaseTransport | None,
        rid: str,
        request: BaseRequest | None = None,
    ) -> web.StreamResponse | HttpResponse:
        """The answer to a request whose body is read: the service's reply (or the gateway's
        error) to pass on, or a stream, relayed on `request` (None: the request is no stream)."""
        if len(body) + 64 * 1024 > bus.max_payload:
            return failure(
                413,
                f"request body of {len(body)} bytes exceeds what the bus "
                f"carries ({bus.max_payload} bytes)",
            )
        path = target.split("?", 1)[0]
        query = url.query_string
        if local is not None:
            answer = local.answer(method, path, query, headers)
            if answer is not None:
                stats.local_answers += 1
                return HttpResponse(status=answer[0], body=answer[1], headers=_JSON)
        sent: dict[str, str] = {}
        for k, v in headers.items():
            low = k.lower()
            if low not in _DROP_IN:
                sent[_text(low)] = _text(v)
        env = HttpRequest(
            method=method,
            path=path,
            query=query,
            headers=sent,
            body=body,
            remote_addr=remote,
            request_id=rid,
        )
        if client_certs and path.endswith("/login") and "/auth/" in path:
            # Vault's cert login path ([<namespace>/]auth/<mount>/login), its only reader.
            env.client_certs = peer_certificates(transport)
        if request is not None and streams.is_stream(api.name, method, path, query):
            # A long-lived stream: the service answers it chunk by chunk (gateway/streams.py).
            async def send(e: HttpRequest, t: float) -> HttpResponse:
                return await forward(bus, subject, e, t, api.name, channel)

            try:
                return await streams.relay(request, env, send)
            except ServiceError as exc:
                return failure(exc.code, exc.message)
        timeout = (
            request_deadline(url.query, settings.request_timeout, blocking=True)
            if api.blocking_queries
            else settings.request_timeout
        )
        try:
            return await forward(bus, subject, env, timeout, api.name, channel)
        except ServiceError as exc:
            if local is not None and exc.code == 503:
                local.forget(gone=True)  # no replica answers: their published state is moot
            if exc.code == 503:
                msg = f"the {api.name} service is not available: no replica answered"
            elif exc.code == 504:
                msg = f"the {api.name} service did not answer within {timeout:g}s"
            else:
                msg = exc.message
            return failure(exc.code, msg)
        finally:
            if local is not None and local.changes_state(method, path):
                local.forget()

    async def api_answer(request: BaseRequest) -> web.StreamResponse | HttpResponse:
        """The API's answer: the gateway's own (an error, a stream) or the reply to pass on."""
        refused = refusal(request.headers, request.content_length)
        if refused is not None:
            return refused
        content = request.content
        if not request.body_exists:
            body = b""  # most reads: nothing to read
        elif content.is_eof():
            # The whole body came with the head (the usual case): take it as it lies, without
            # aiohttp's read loop (a broken body raises here as it would there).
            body = content.read_nowait()
            if len(body) > limit:
                return too_large()
        else:
            body = await request.read()
        return await exchange(
            request.method,
            request.raw_path,
            request.headers,
            request.rel_url,
            body,
            request.remote or "",
            request.transport,
            request[REQUEST_ID],
            request,
        )

    async def proxy(request: BaseRequest) -> web.StreamResponse:
        """The API's answer as a Response, for the console, which adds headers to it."""
        out = await api_answer(request)
        if isinstance(out, HttpResponse):
            return written.ordinary(out.status, out.headers, out.body)
        return out

    async def forwarded(request: BaseRequest) -> web.StreamResponse:
        """The API's answer, a reply written straight to the connection."""
        out = await api_answer(request)
        if isinstance(out, HttpResponse):
            return await written.write_reply(
                request, out.status, out.headers, out.body, request[REQUEST_ID]
            )
        return out

    async def serve_fast(message: RawRequestMessage, body: bytes, conn: Connection) -> None:
        """`handle` and `forwarded` for a request the fast lane took (see `takes`): its body
        complete, no stream, no page of the gateway's own, no Expect."""
        rid = opened(message.headers)
        start = time.perf_counter()
        status = 500
        url = message.url
        try:
            try:
                out = refusal(message.headers, len(body))
                if out is None:
                    out = await exchange(
                        message.method,
                        message.path,
                        message.headers,
                        url,
                        body,
                        conn.remote,
                        conn.transport,
                        rid,
                    )
                assert isinstance(out, HttpResponse)  # no stream: `request` is None
            except Exception:
                log.exception("gateway failure")
                out = failure(500, "internal error in the gateway")
            status = out.status
            await conn.write_reply(message, out.status, out.headers, out.body, rid)
        except asyncio.CancelledError:
            status = CLIENT_GONE
            raise
        finally:
            closed(message.method, url, status, start)

    def takes(message: RawRequestMessage) -> bool:
        """Whether `handle` would send the request to `forwarded` (no stream among them); HEAD,
        whose answer aiohttp writes, goes the ordinary way."""
        method = message.method
        if method not in fast_methods or hdrs.EXPECT in message.headers:
            return False
        url = message.url
        if _route(method, url.path_safe) is not forwarded:
            return False
        path = message.path.split("?", 1)[0]
        return not streams.is_stream(api_name, method, path, url.query_string)

    # The web console; `ui_proxies` (shared by the gateway's listeners) lets it reach all three.
    ui_proxies = {} if ui_proxies is None else ui_proxies
    ui_proxies[api.name] = proxy
    console = ui.console(api, ui_proxies)
    # Exact paths of the gateway's own; the methods they answer (None: any).
    own: dict[str, tuple[Handler, frozenset[str] | None]] = {
        "/healthz": (healthz, _GET),
        "/readyz": (readyz, _GET),
        "/metrics": (prometheus, _GET),
        "/_echo": (echo, None),
    }

    def _route(method: str, path: str) -> Handler:
        """The handler for `path` (decoded but for `%2F` and `%25`, as aiohttp's router matched
        it): the gateway's own paths, the console under /ui, and every other path the API's."""
        found = own.get(path)
        if found is not None:
            if found[1] is None or method in found[1]:
                return found[0]
        elif path.startswith(ui.PREFIX):
            page = console(method, path)
            if page is not None:
                return page
        return forwarded

    return Listener(handle, limit, FastLane(takes, serve_fast))
