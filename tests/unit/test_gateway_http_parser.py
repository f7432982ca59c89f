"""The gateway's request parser (services/gateway/http_parser.py) against the pure-Python parser
it hands over to: however a stream is cut into reads, it yields the same requests (method,
target, headers, body) and refuses at the same request, so llhttp and the Python parser never
disagree on where a request ends. Streams an attacker would send: pipelined LIST and GET, LIST
with Content-Length and chunked bodies, conflicting Content-Length and Transfer-Encoding,
lowercase methods, garbage after LIST, requests glued to the end of a body."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.http_parser import HttpRequestParserPy
from aiohttp.web_protocol import _ErrInfo
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.gateway.http_parser import SwitchingParser

Seen = tuple[str, str, str, tuple[tuple[str, str], ...], bytes]
REFUSED = ("refused", "", "", (), b"")
CLOSED = ("closed", "", "", (), b"")  # the request before said Connection: close


def get(path: str, extra: str = "") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: t\r\n{extra}\r\n".encode()


def req(method: str, path: str, body: bytes = b"", extra: str = "") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
    return head.encode() + body


def chunked(method: str, path: str, chunks: list[bytes], trailer: str = "") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
    body = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks)
    return head + body + b"0\r\n" + trailer.encode() + b"\r\n"


LIST = b"LIST /v1/kv/metadata HTTP/1.1\r\nHost: t\r\n\r\n"
STREAMS = {
    "get-list-get-list": get("/a") + LIST + get("/b") + LIST,
    "list-first": LIST + get("/a"),
    "list-with-body": req("LIST", "/v1/x", b'{"a":1}') + get("/after"),
    "list-body-looks-like-request": req("LIST", "/v1/x", get("/smuggled")) + get("/after"),
    "post-body-then-list-glued": req("POST", "/v1/p", b"abcLI") + LIST + get("/z"),
    "post-crlfcrlf-body-then-list": req("POST", "/v1/p", b"a\r\n\r\nb") + LIST,
    "chunked-then-list": chunked("POST", "/v1/c", [b"xx", b"\r\n\r\n", b"LIST / HTTP/1.1"])
    + LIST
    + get("/d"),
    "chunked-list-with-trailer": chunked("LIST", "/v1/c", [b"abc"], "X-T: 1\r\n") + get("/e"),
    "cl-and-te": b"POST /v1/q HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + LIST,
    "list-cl-and-te": b"LIST /v1/q HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + get("/smuggled"),
    "two-content-lengths": b"POST /v1/q HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n"
    b"Content-Length: 30\r\n\r\nabc" + get("/smuggled"),
    "list-two-content-lengths": b"LIST /v1/q HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n"
    b"Content-Length: 30\r\n\r\nabc" + get("/smuggled"),
    "lowercase-list": get("/a") + b"list /v1/x HTTP/1.1\r\nHost: t\r\n\r\n" + get("/b"),
    "garbage-after-list": get("/a") + b"LIST\x00garbage\r\n\r\n" + get("/b"),
    "list-no-space": get("/a") + b"LISTING /v1/x HTTP/1.1\r\nHost: t\r\n\r\n",
    "unknown-method": b"BREW /pot HTTP/1.1\r\nHost: t\r\n\r\n" + get("/a"),
    "crlf-between": get("/a") + b"\r\n\r\n" + LIST + b"\r\n" + get("/b"),
    "te-chunked-list-bad-chunk": b"LIST /v1/c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: "
    b"chunked\r\n\r\nzz\r\n\r\n" + get("/x"),
    "chunk-size-is-a-request": b"POST /v1/c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: "
    b"chunked\r\n\r\n" + get("/smuggled") + LIST,
    "negative-length": b"POST /v1/q HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\n\r\n" + LIST,
    "expect-upgrade": b"GET /a HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\n"
    b"Upgrade: h2c\r\n\r\n" + LIST,
    "http10-list": b"LIST /v1/x HTTP/1.0\r\n\r\n" + get("/a"),
    "head-split-header": b"GET /a HTTP/1.1\r\nHost: t\r\nX: a\r\n b\r\n\r\n" + LIST,
}


class _Protocol:
    """What a parser asks of the connection: nothing that matters here."""

    _reading_paused = False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self, resume_parser: bool = True) -> None:
        pass


def _seen(msg: Any, payload: Any) -> Seen:
    if isinstance(msg, _ErrInfo):
        return REFUSED
    headers = tuple((k.lower(), v) for k, v in msg.headers.items())
    try:
        body = payload.read_nowait(-1)
    except Exception:  # the body broke off: its handler's read fails
        body = b"<broken>"
    return (msg.method, msg.path, str(msg.version), headers, body)


def _feed(parser: Any, reads: list[bytes]) -> list[Seen]:
    """What `parser` yields from `reads`, bodies read once all is fed, up to the first refusal."""
    got: list[tuple[Any, Any]] = []
    for data in reads:
        try:
            messages, upgraded, tail = parser.feed_data(data)
        except HttpProcessingError:
            got.append((_ErrInfo(400, None, ""), None))
            break
        got.extend(messages)
        if any(isinstance(m, _ErrInfo) for m, _ in got):
            break
        if upgraded:
            # The gateway serves no upgrade: the protocol declines and re-feeds the rest.
            parser.set_upgraded(False)
            got.extend(parser.feed_data(tail)[0])
    seen: list[Seen] = []
    for msg, payload in got:
        seen.append(_seen(msg, payload))
        if seen[-1] == REFUSED:
            break
        if msg.should_close:
            seen.append(CLOSED)  # the connection closes after answering it
            break
    return seen


def _agree(got: list[Seen], expected: list[Seen]) -> bool:
    """The same requests; where the stream ends in a refusal or a close, a refusal may come
    sooner (the Python parser drops what it read in the same call as a refusal, and refuses
    bytes after a Connection: close in the same call), never later."""
    if got == expected:
        return True
    if not expected or expected[-1] not in (REFUSED, CLOSED):
        return False
    return bool(got) and got[-1] == REFUSED and expected[: len(got) - 1] == got[:-1]


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


def _parsers(loop: asyncio.AbstractEventLoop) -> tuple[SwitchingParser, HttpRequestParserPy]:
    proto = _Protocol()
    kw = {"max_line_size": 8190, "max_field_size": 8190, "max_headers": 128}
    return (
        SwitchingParser(proto, loop, 2**16, **kw),
        HttpRequestParserPy(proto, loop, 2**16, **kw),
    )


def _reference(loop: asyncio.AbstractEventLoop, stream: bytes) -> list[Seen]:
    """The Python parser alone, one byte a read: each request seen as it completes."""
    return _feed(_parsers(loop)[1], [stream[i : i + 1] for i in range(len(stream))])


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_every_cut_yields_what_the_python_parser_yields(
    loop: asyncio.AbstractEventLoop, name: str
) -> None:
    stream = STREAMS[name]
    expected = _reference(loop, stream)
    assert expected, name
    for cut in range(len(stream) + 1):
        got = _feed(_parsers(loop)[0], [stream[:cut], stream[cut:]])
        assert _agree(got, expected), (name, cut, got)
    bytewise = _feed(_parsers(loop)[0], [stream[i : i + 1] for i in range(len(stream))])
    assert bytewise == expected


def test_list_after_get_is_served_on_the_same_connection(loop: asyncio.AbstractEventLoop) -> None:
    got = _feed(_parsers(loop)[0], [STREAMS["get-list-get-list"]])
    assert [(s[0], s[1]) for s in got] == [
        ("GET", "/a"),
        ("LIST", "/v1/kv/metadata"),
        ("GET", "/b"),
        ("LIST", "/v1/kv/metadata"),
    ]


def test_a_body_never_becomes_a_request(loop: asyncio.AbstractEventLoop) -> None:
    got = _feed(_parsers(loop)[0], [STREAMS["list-body-looks-like-request"]])
    assert [(s[0], s[1], s[4]) for s in got] == [
        ("LIST", "/v1/x", get("/smuggled")),
        ("GET", "/after", b""),
    ]


FRAGMENTS = [
    get("/g"),
    LIST,
    req("LIST", "/l", b"body"),
    req("POST", "/p", b"xyLIST"),
    req("POST", "/p", b"\r\n\r\n"),
    chunked("POST", "/c", [b"a\r\n\r\n", b"LIST"]),
    chunked("LIST", "/c", [b"q"]),
    b"\r\n",
    b"list /lower HTTP/1.1\r\nHost: t\r\n\r\n",
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    parts=st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=6),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=6),
)
def test_random_pipelines_cut_anywhere(parts: list[bytes], cuts: list[int]) -> None:
    lp = asyncio.new_event_loop()
    try:
        stream = b"".join(parts)
        bounds = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
        reads = [stream[a:b] for a, b in itertools.pairwise(bounds)]
        assert _agree(_feed(_parsers(lp)[0], reads), _reference(lp, stream))
    finally:
        lp.close()
