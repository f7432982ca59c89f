"""Requests parsed by llhttp (aiohttp's C parser), handed to the pure-Python parser at the start
of the first message llhttp refuses, so Vault's `LIST` (and any other method token) still works.

llhttp parses a request for about a quarter of the pure-Python parser's CPU, but answers any
method outside its table with its own 400. Switching parsers mid-connection is only safe where
both would agree that a message starts, so the switch happens only at a byte offset llhttp
itself stood on between messages:

- The stream is fed to llhttp in pieces that end where a message can end: after every
  CRLFCRLF (the end of a head, or of a chunked body) and, after a head announcing a
  Content-Length body, exactly that many bytes later. No message can end inside a piece, so a
  message that completed in a piece completed at its last byte.
- After each piece, llhttp is between messages ("clean") iff the last message it returned is
  complete: a message begun after it would have a head ending in that CRLFCRLF, and so would
  have been returned too.
- When llhttp refuses a piece that began clean, the refused message starts at that piece's
  first byte and nothing of it was delivered: the rest of the connection, from that byte, goes
  to a fresh pure-Python parser. A refusal anywhere else is answered 400 as llhttp words it.
- Whatever llhttp may hold back unparsed (a body paused by flow control, a Content-Length this
  module cannot read) breaks the reasoning above: such a connection never switches.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp.helpers import set_exception
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.http_parser import HttpRequestParserPy
from aiohttp.streams import EMPTY_PAYLOAD
from aiohttp.web_protocol import _ErrInfo

try:
    from aiohttp._http_parser import HttpRequestParser as _LlHttp
except ImportError:  # no C extension (AIOHTTP_NO_EXTENSIONS builds): the Python parser alone
    _LlHttp = None

_END = b"\r\n\r\n"


class SwitchingParser:
    """The request parser of one connection (the interface aiohttp's protocol uses)."""

    def __init__(self, protocol: Any, loop: asyncio.AbstractEventLoop, limit: int, **kw: Any):
        self._args = (protocol, loop, limit)
        self._kw = kw
        self._c: Any = _LlHttp(protocol, loop, limit, **kw) if _LlHttp else None
        self._py: HttpRequestParserPy | None = (
            None if self._c else HttpRequestParserPy(protocol, loop, limit, **kw)
        )
        self._last3 = b""  # the stream's last bytes: a CRLFCRLF may span two reads
        self._body_left = 0  # bytes of a Content-Length body still to come
        self._payload: Any = None  # the payload of the last message llhttp returned
        self._clean = True  # the piece being fed began with llhttp between messages
        self._head = b""  # that piece's bytes from earlier reads, while it began clean
        self._pinned = False  # llhttp may hold bytes back: never switch

    def _switch(self) -> HttpRequestParserPy:
        protocol, loop, limit = self._args
        self._py = HttpRequestParserPy(protocol, loop, limit, **self._kw)
        self._c = None
        return self._py

    def feed_data(self, data: bytes) -> tuple[list[Any], bool, bytes]:
        if self._py is not None:
            return self._py.feed_data(data)
        if not data or self._pinned:
            return self._c.feed_data(data)
        out: list[Any] = []
        pos, size = 0, len(data)
        while pos < size:
            if self._body_left:
                end = min(size, pos + self._body_left)
                at_split = end - pos == self._body_left
                self._body_left -= end - pos
            else:
                end = self._next_end(data, pos)
                at_split = end > 0
                end = end if at_split else size
            piece = data if pos == 0 and end == size else data[pos:end]
            try:
                messages, upgraded, tail = self._c.feed_data(piece)
            except HttpProcessingError as exc:
                if not self._clean:
                    return self._refused(out, exc)
                # llhttp stood between messages at the piece's first byte and refused what
                # follows: from there on, the Python parser reads the connection.
                replay = self._head + data[pos:]
                try:
                    more, upgraded, tail = self._switch().feed_data(replay)
                except HttpProcessingError as exc2:
                    return self._refused(out, exc2)
                out.extend(more)
                return out, upgraded, tail
            out.extend(messages)
            if upgraded:
                # The protocol re-feeds the tail if it declines: from llhttp's exact offset.
                self._switch()
                return out, True, tail + data[end:]
            if messages:
                msg, self._payload = messages[-1]
            if not at_split:
                if self._clean:
                    # Bounded: llhttp refuses a head beyond its line and header limits.
                    self._head += piece
                break
            self._head = b""
            self._clean = self._payload is None or self._payload.is_eof()
            if messages and not self._clean and not msg.chunked:
                length = msg.headers.get("Content-Length", "")
                if length.isdigit() and length.isascii():
                    self._body_left = int(length)
                else:
                    self._pinned = True
            pos = end
        self._last3 = (self._last3 + data)[-3:] if size < 3 else data[-3:]
        return out, False, b""

    def _next_end(self, data: bytes, pos: int) -> int:
        """Where the first CRLFCRLF ending after `pos` ends, or 0; it may begin in the last
        read, or before `pos` (`\r\n\r\n\r\n` ends twice)."""
        if pos == 0 and self._last3:
            spans = (self._last3 + data[:3]).find(_END)
            if spans >= 0:
                return spans + 4 - len(self._last3)
        found = data.find(_END, max(0, pos - 3))
        return found + 4 if found >= 0 else 0

    def _refused(self, out: list[Any], exc: HttpProcessingError) -> tuple[list[Any], bool, bytes]:
        # What the protocol does with a refusal, without losing the requests before it; llhttp
        # goes on refusing whatever follows, as the Python parser answers it as it would have.
        self._pinned = True
        if self._payload is not None and not self._payload.is_eof():
            # The request whose body broke off fails its read instead of waiting for more.
            wrap = self._kw.get("payload_exception")
            set_exception(self._payload, wrap(str(exc)) if wrap else exc, exc)
        out.append((_ErrInfo(status=400, exc=exc, message=exc.message), EMPTY_PAYLOAD))
        return out, False, b""

    def _current(self) -> Any:
        return self._py if self._py is not None else self._c

    def set_upgraded(self, val: bool) -> None:
        self._current().set_upgraded(val)

    def message_consumed(self) -> None:
        self._current().message_consumed()

    def pause_reading(self) -> None:
        # llhttp keeps the rest of a paused body's read to itself: no piece boundary is sure.
        self._pinned = True
        self._current().pause_reading()
