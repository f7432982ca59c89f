"""Streamed responses the gateway builds from a service's chunked answers. The scheduler's
/v1/event/stream answers one chunk per request (waiting like a blocking query, up to its 10 s
heartbeat), a followed /v1/client/fs/logs read answers what the task wrote meanwhile, and
/v1/client/fs/stream (followed by default) what was appended to the file; the gateway keeps the
client's response open, writes each chunk as it comes and asks for the next from where the last
one ended (the index, the file's offset, or the log position, until the service says it is
done). A gone client ends it."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qsl, urlencode

from aiohttp import web

from shared.errors import ServiceError
from shared.messages import HttpRequest, HttpResponse

EVENT_STREAM = "/v1/event/stream"
LOGS = "/v1/client/fs/logs/"
FILE_STREAM = "/v1/client/fs/stream/"
# Marks a file stream's follow-up chunks (services/scheduler/api/fs.py reads it).
RESUME = "x-sched-stream-resume"
# A followed log read's next chunk starts where the last one said (services/scheduler/api/fs.py).
LOG_POSITION = "X-Sched-Log-Position"
LOG_RESUME = "x-sched-log-resume"
_TRUE = {"1", "t", "T", "true", "TRUE", "True"}
POLL_TIMEOUT = 30.0  # the service answers within its 10 s heartbeat
_DROP = {"content-length", "transfer-encoding", "connection"}

Send = Callable[[HttpRequest, float], Awaitable[HttpResponse]]


def is_stream(api: str, method: str, path: str, query: str = "") -> bool:
    if api != "scheduler" or method != "GET":
        return False
    if path == EVENT_STREAM or path.startswith(FILE_STREAM):
        return True  # a file stream ends by itself when not followed
    follow = dict(parse_qsl(query, keep_blank_values=True)).get("follow", "")
    return path.startswith(LOGS) and follow in _TRUE


def _with(query: str, **values: str) -> str:
    pairs = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k not in values]
    return urlencode([*pairs, *values.items()])


def _next_query(env: HttpRequest, reply: HttpResponse) -> str | None:
    """Where the next chunk starts, or None when the stream is complete."""
    if env.path == EVENT_STREAM:
        return _with(env.query, index=reply.headers.get("X-Sched-Index") or "0")
    if reply.headers.get("X-Sched-Log-Done") != "false":
        return None  # the task is done (or the service does not chunk): nothing more comes
    if env.path.startswith(LOGS):
        return env.query  # the position travels in LOG_RESUME
    return _with(env.query, origin="start", offset=reply.headers.get("X-Sched-Log-Offset", "0"))


async def relay(request: web.Request, env: HttpRequest, send: Send) -> web.StreamResponse:
    first = await send(env, POLL_TIMEOUT)
    if first.status != 200:
        resp = web.Response(status=first.status, body=first.body)
        for k, v in first.headers.items():
            if k.lower() not in _DROP:
                resp.headers[k] = v
        return resp
    out = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    await out.prepare(request)
    reply = first
    with contextlib.suppress(ConnectionError, ServiceError):
        while True:
            await out.write(reply.body)
            query = _next_query(env, reply)
            if query is None or request.transport is None or request.transport.is_closing():
                break
            headers = env.headers
            if env.path.startswith(FILE_STREAM):
                headers = {**env.headers, RESUME: "true"}
            elif env.path.startswith(LOGS):
                headers = {**env.headers, LOG_RESUME: reply.headers.get(LOG_POSITION, "")}
            nxt = HttpRequest(
                method=env.method,
                path=env.path,
                query=query,
                headers=headers,
                remote_addr=env.remote_addr,
                request_id=env.request_id,
            )
            reply = await send(nxt, POLL_TIMEOUT)
            if reply.status != 200:
                break
    with contextlib.suppress(ConnectionError):
        await out.write_eof()
    return out
