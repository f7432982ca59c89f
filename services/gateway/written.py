"""A service's reply written straight to the connection: the status line and headers built as
text from the reply's own headers, the body after them, one write.

aiohttp's Response copies the headers into a CIMultiDict, adds its own in three passes, then
serialises them again: about a quarter of the listener's CPU for a forwarded request
(bench/gateway_http.py). The bytes on the wire are the same as that Response would write.
Anything out of the ordinary (HEAD, a status without a body, a control character in a header,
which aiohttp refuses) goes the ordinary way."""

from __future__ import annotations

import re
from collections.abc import Mapping
from http import HTTPStatus

from aiohttp import web
from aiohttp.helpers import rfc822_formatted_time
from aiohttp.http import SERVER_SOFTWARE, HttpVersion, HttpVersion10, HttpVersion11
from aiohttp.web_request import BaseRequest

# Framing and hop-by-hop headers, and what the gateway sets itself (one X-Request-Id, its own).
DROP_OUT = frozenset(
    {"content-length", "transfer-encoding", "connection", "date", "server", "x-request-id"}
)
_REASONS = {s.value: s.phrase for s in HTTPStatus}
_SERVER = f"Server: {SERVER_SOFTWARE}\r\n"
# What ends a head: Server, then Connection where the version's default does not hold.
_TAIL = _SERVER + "\r\n"
_TAIL_10_KEEP = _SERVER + "Connection: keep-alive\r\n\r\n"
_TAIL_11_CLOSE = _SERVER + "Connection: close\r\n\r\n"
_CRLF = "\r\n"
_UNTYPED = "Content-Type: application/octet-stream\r\n"
# What aiohttp refuses in a header (a control character but tab): header injection.
_FORBIDDEN = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


class _Written(web.StreamResponse):
    """A response already on the wire: aiohttp's own steps for it do nothing."""

    def __init__(self, status: int, keep_alive: bool) -> None:
        super().__init__(status=status)
        self._alive = keep_alive

    @property
    def keep_alive(self) -> bool:
        return self._alive

    async def prepare(self, request: BaseRequest) -> None:
        return None

    async def write_eof(self, data: bytes = b"") -> None:
        return None


def ordinary(status: int, headers: Mapping[str, str], body: bytes) -> web.Response:
    """The reply as an aiohttp Response (for callers that add headers of their own)."""
    out = {k: v for k, v in headers.items() if k.lower() not in DROP_OUT}
    return web.Response(status=status, body=body, headers=out)


_STATUS_LINES: dict[tuple[HttpVersion, int], str] = {}


def _status_line(version: HttpVersion, status: int) -> str:
    """The status line, built once per HTTP version and status."""
    key = (version, status)
    line = _STATUS_LINES.get(key)
    if line is None:
        line = f"HTTP/{version.major}.{version.minor} {status} {_REASONS.get(status, '')}\r\n"
        if len(_STATUS_LINES) < 4096:  # bounded: the version is the client's to choose
            _STATUS_LINES[key] = line
    return line


def encode(
    version: HttpVersion,
    keep_alive: bool,
    method: str,
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    request_id: str,
) -> bytes | None:
    """The reply with `request_id` as the bytes to write, or None where aiohttp's own Response
    must write it (`ordinary`)."""
    if method == "HEAD" or not 200 <= status < 600 or status in (204, 304):
        return None
    # Only the reply's headers and the request id (the client's, where it sent one) can carry
    # a control character; the gateway's own lines cannot.
    lines: list[str] = []
    typed = False
    for name, value in headers.items():
        low = name.lower()
        if low in DROP_OUT:
            continue
        typed = typed or low == "content-type"
        lines.append(f"{name}: {value}")
    lines.append(f"X-Request-Id: {request_id}")
    text = "".join(lines)
    # isprintable() is false for every control character (and for tab): a quick yes.
    if not text.isprintable() and _FORBIDDEN.search(text) is not None:
        return None  # aiohttp refuses it, as before
    if version == HttpVersion10:
        tail = _TAIL_10_KEEP if keep_alive else _TAIL
    elif version == HttpVersion11 and not keep_alive:
        tail = _TAIL_11_CLOSE
    else:
        tail = _TAIL
    untyped = _UNTYPED if body and not typed else ""
    head = (
        f"{_status_line(version, status)}{_CRLF.join(lines)}\r\nContent-Length: {len(body)}"
        f"\r\n{untyped}Date: {rfc822_formatted_time()}\r\n{tail}"
    )
    return head.encode() + body


async def write_reply(
    request: BaseRequest, status: int, headers: Mapping[str, str], body: bytes, request_id: str
) -> web.StreamResponse:
    """Answer `request` with the reply and `request_id` (an ordinary Response gets its
    X-Request-Id from the listener's handler, as every other answer)."""
    keep_alive = request.keep_alive
    data = encode(request.version, keep_alive, request.method, status, headers, body, request_id)
    if data is None:
        return ordinary(status, headers, body)
    try:
        await request.writer.write_eof(data)
    except ConnectionError:
        keep_alive = False  # the client left: the connection closes
    return _Written(status, keep_alive)
